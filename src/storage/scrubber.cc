#include "storage/scrubber.h"

#include <algorithm>
#include <optional>

#include "common/logging.h"

namespace weft::storage {

Scrubber::Scrubber(ChunkEngine& engine, ScrubOptions options, metrics::Registry& registry)
    : engine_(engine),
      options_(std::move(options)),
      bytes_scrubbed_(registry.counter("weft_storage_scrub_bytes_total", "Chunk bytes re-verified by the scrubber",
                                       {{"target", engine.options().target_id}})),
      corrupt_found_(registry.counter("weft_storage_scrub_corrupt_chunks_total", "Corrupt chunks found by the scrubber",
                                      {{"target", engine.options().target_id}})),
      unreadable_found_(registry.counter("weft_storage_scrub_unreadable_chunks_total",
                                         "Chunks the scrubber could not read back from the disk (I/O errors)",
                                         {{"target", engine.options().target_id}})),
      passes_done_(registry.counter("weft_storage_scrub_passes_total", "Completed scrub passes",
                                    {{"target", engine.options().target_id}})) {}

Scrubber::~Scrubber() { stop(); }

void Scrubber::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] {
    for (;;) {
      run_pass();
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, options_.pass_interval, [&] { return stopping_; })) return;
    }
  });
}

void Scrubber::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::chrono::steady_clock::duration scrub_pace(uint64_t bytes, uint64_t bytes_per_sec) {
  // In double seconds: bytes * 10^6 overflows 64 bits past 18 TB.
  std::chrono::duration<double> s(static_cast<double>(bytes) / static_cast<double>(std::max<uint64_t>(bytes_per_sec, 1)));
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(s);
}

bool Scrubber::pace(std::chrono::steady_clock::time_point start, uint64_t bytes) {
  auto due = start + scrub_pace(bytes, options_.bytes_per_sec);
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, due, [&] { return stopping_; });
  return !stopping_;
}

ScrubReport Scrubber::run_pass() {
  std::lock_guard pass_lock(pass_mu_);
  ScrubReport report;
  {
    std::lock_guard lock(mu_);
    found_.clear();
  }
  auto start = std::chrono::steady_clock::now();
  std::optional<ChunkId> next = ChunkId{};
  while (next) {
    auto page = engine_.list(next, 256);
    if (!page) {
      WEFT_LOG_WARN("scrub of {}: {}", engine_.dir(), page.error());
      report.interrupted = true;
      break;
    }
    next.reset();
    for (const ChunkInfo& c : *page) {
      auto ok = engine_.verify(c.id);
      if (!ok && ok.error().code() == Code::kCorruption) {
        report.corrupt.push_back(c.id);
        {
          std::lock_guard lock(mu_);
          found_.push_back(c.id);
        }
        corrupt_found_.inc();
        if (auto held = corrupt_log_.admit())
          WEFT_LOG_ERROR("scrub of target {} ({}): {}; reads of it answer corruption (clients read another "
                         "replica) until the chunk is repaired or rewritten{}",
                         engine_.options().target_id, engine_.dir(), ok.error(), LogThrottle::held_back(*held));
        if (options_.on_corrupt) options_.on_corrupt(c.id, ok.error());
      } else if (!ok && ok.error().code() != Code::kNotFound) {  // kNotFound: removed since the listing
        report.unreadable.push_back(c.id);
        unreadable_found_.inc();
        if (auto held = unreadable_log_.admit())
          WEFT_LOG_ERROR("scrub of target {} ({}): chunk {} could not be read back: {}; reads of it fail here "
                         "(clients read another replica) until it is rewritten: check the device{}",
                         engine_.options().target_id, engine_.dir(), c.id, ok.error(), LogThrottle::held_back(*held));
      }
      report.chunks++;
      report.bytes += c.length;
      bytes_scrubbed_.inc(c.length);
      if (!pace(start, report.bytes)) {
        report.interrupted = true;
        break;
      }
    }
    if (report.interrupted) break;
    if (page->size() == 256) next = page->back().id.successor();  // nullopt after the largest id
  }
  std::lock_guard lock(mu_);
  if (!report.interrupted) {
    corrupt_ = std::move(found_);
    ++passes_;
    passes_done_.inc();
  } else {
    for (const ChunkId& id : found_)
      if (std::find(corrupt_.begin(), corrupt_.end(), id) == corrupt_.end()) corrupt_.push_back(id);
  }
  found_.clear();
  return report;
}

std::vector<ChunkId> Scrubber::corrupt_chunks() const {
  std::lock_guard lock(mu_);
  return corrupt_;
}

void Scrubber::forget(const ChunkId& id) {
  std::lock_guard lock(mu_);
  std::erase(corrupt_, id);
  std::erase(found_, id);
}

uint64_t Scrubber::passes() const {
  std::lock_guard lock(mu_);
  return passes_;
}

}  // namespace weft::storage
