// benchsuite/progress.h
// Live progress of the running phase on stderr: on a terminal a bar with the
// rate and the ETA, redrawn 4 times a second; otherwise one plain line when
// a phase starts, every 10 s, and when it ends.
// Threading: add() from any thread; begin()/end() from the driving thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace weft::bench {

std::string human_bytes(double bytes);

class Progress {
 public:
  Progress();
  ~Progress();

  // `total` units of work ("B" units print as bytes/s); seconds > 0 makes
  // the phase time-bound (the bar follows the clock, `total` is ignored).
  void begin(const std::string& label, uint64_t total, const std::string& unit, double seconds = 0);
  void add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
  void end();
  // A line of its own (clears the bar first).
  void note(const std::string& line);

 private:
  void loop();
  std::string line(bool final) const;

  const bool tty_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool active_ = false;
  bool stop_ = false;
  std::string label_, unit_;
  uint64_t total_ = 0;
  double seconds_ = 0;
  std::atomic<uint64_t> done_{0};
  std::chrono::steady_clock::time_point start_;
};

}  // namespace weft::bench
