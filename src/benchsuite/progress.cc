#include "benchsuite/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace weft::bench {

std::string human_bytes(double v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.1f} {}", v, units[u]);
}

Progress::Progress() : tty_(::isatty(2) == 1) { thread_ = std::thread([this] { loop(); }); }

Progress::~Progress() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Progress::begin(const std::string& label, uint64_t total, const std::string& unit, double seconds) {
  std::lock_guard lock(mu_);
  label_ = label;
  unit_ = unit;
  total_ = total;
  seconds_ = seconds;
  done_ = 0;
  start_ = std::chrono::steady_clock::now();
  active_ = true;
  if (!tty_) std::fprintf(stderr, "  %s ...\n", label_.c_str());
}

void Progress::end() {
  std::lock_guard lock(mu_);
  if (!active_) return;
  active_ = false;
  std::fprintf(stderr, tty_ ? "\r%s\033[K\n" : "%s\n", line(true).c_str());
}

void Progress::note(const std::string& text) {
  std::lock_guard lock(mu_);
  std::fprintf(stderr, tty_ ? "\r\033[K%s\n" : "%s\n", text.c_str());
}

std::string Progress::line(bool final) const {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  uint64_t done = done_.load(std::memory_order_relaxed);
  double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  double frac;
  double eta;
  if (seconds_ > 0) {
    frac = std::min(1.0, secs / seconds_);
    eta = std::max(0.0, seconds_ - secs);
  } else {
    frac = total_ ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total_)) : 1.0;
    eta = rate > 0 && total_ > done ? static_cast<double>(total_ - done) / rate : 0;
  }
  if (final) frac = 1.0;
  std::string rate_s = unit_ == "B" ? human_bytes(rate) + "/s" : fmt::format("{:.0f} {}/s", rate, unit_);
  int bar = static_cast<int>(frac * 30);
  if (final)
    return fmt::format("  {:<28} [{:#<30}] done in {:.1f}s, {}", label_, "", secs, rate_s);
  return fmt::format("  {:<28} [{}{}] {:5.1f}% {} ETA {:.0f}s", label_, std::string(bar, '#'),
                     std::string(30 - bar, ' '), frac * 100, rate_s, eta);
}

void Progress::loop() {
  std::unique_lock lock(mu_);
  auto last_plain = std::chrono::steady_clock::now();
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_ || !active_) continue;
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line(false).c_str());
      std::fflush(stderr);
    } else if (std::chrono::steady_clock::now() - last_plain > std::chrono::seconds(10)) {
      last_plain = std::chrono::steady_clock::now();
      std::fprintf(stderr, "%s\n", line(false).c_str());
    }
  }
}

}  // namespace weft::bench
