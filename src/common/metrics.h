// common/metrics.h
// Process-wide metrics: counters, gauges and log-bucketed latency histograms,
// exported in the Prometheus text format (served by rpc/metrics_server.h).
// Hot paths only touch relaxed atomics: no lock, no allocation. Registration
// takes the registry mutex once and finds an existing series by an index
// (O(log n) in the series registered). The returned reference stays valid
// until the series is removed (remove(); most never are: then for the life
// of the registry).
// Names follow Prometheus conventions with the unit last
// (weft_rpc_latency_us, weft_storage_bytes_written_total).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void add(int64_t d) { value_.fetch_add(d, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Values are unsigned integers in the unit named by the metric (usually µs).
// Buckets: 4 per power of two (relative error <= 19%), from 0 up to 2^48.
class Histogram {
 public:
  static constexpr int kSubBits = 2;
  static constexpr int kMaxExp = 48;
  static constexpr size_t kBuckets = (kMaxExp + 1) << kSubBits;

  void observe(uint64_t v);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  uint64_t sum() const { return sum_.load(std::memory_order_relaxed); }
  // Approximate quantile (q in [0,1]) from the buckets: the upper bound of the bucket holding it.
  uint64_t quantile(double q) const;
  // Copies bucket counts (for export or for per-interval differences).
  std::array<uint64_t, kBuckets> snapshot() const;

  static size_t bucket_of(uint64_t v);
  static uint64_t bucket_upper(size_t bucket);  // inclusive upper bound

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
};

class Registry {
 public:
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const Labels& labels = {});
  // A gauge computed at scrape time (queue depths, free space). fn must be thread-safe
  // and outlive the registry, or be removed with remove_callbacks(owner).
  void gauge_fn(const std::string& name, const std::string& help, const Labels& labels,
                std::function<double()> fn, const void* owner = nullptr);
  void remove_callbacks(const void* owner);
  // Removes the counter, gauge or histogram series `name` with `labels` (not
  // gauge_fn ones: remove_callbacks); returns whether there was one. For
  // series named after something that goes away (a removed node), so a
  // registry does not grow with everything that ever came and went.
  // REQUIRES: the series has one owner (the one that made it; nobody else
  // asks for that name and labels), and the owner has dropped every pointer
  // and reference to it first: remove() destroys it, and they would dangle.
  // Asking for it again afterwards makes a new series (counting from 0).
  // Linear in the series registered (removals are rare; lookups are not).
  bool remove(const std::string& name, const Labels& labels);
  // The number of series registered (each gauge_fn counts one).
  size_t size() const;

  std::string prometheus_text() const;

  static Registry& global();

 private:
  enum class Kind { kCounter, kGauge, kHistogram, kGaugeFn };
  struct Entry {
    Kind kind;
    std::string name, help, labels;  // labels pre-rendered: {a="b",c="d"}
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> fn;
    const void* owner = nullptr;
  };
  // Views into an Entry's own name and labels (an Entry never moves: they stay valid while it lives).
  struct Key {
    Kind kind;
    std::string_view name, labels;
    auto operator<=>(const Key&) const = default;
  };
  Entry* find_or_add(Kind kind, const std::string& name, const std::string& help, const Labels& labels);

  mutable std::mutex mu_;
  // In registration order (the order of series within a family when rendered).
  std::vector<std::unique_ptr<Entry>> entries_;  // GUARDED_BY(mu_)
  // Every counter, gauge and histogram of entries_ by (kind, name, labels);
  // gauge_fn entries are not looked up and not indexed.
  std::map<Key, Entry*> index_;  // GUARDED_BY(mu_)
};

// Records the time from construction to destruction into a histogram (µs).
class ScopedLatency {
 public:
  explicit ScopedLatency(Histogram& h);
  ~ScopedLatency();
  ScopedLatency(const ScopedLatency&) = delete;
  ScopedLatency& operator=(const ScopedLatency&) = delete;

 private:
  Histogram& h_;
  int64_t start_ns_;
};

}  // namespace weft::metrics
