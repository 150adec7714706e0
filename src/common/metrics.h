// common/metrics.h
// Process-wide metrics: counters, gauges and log-bucketed latency histograms,
// exported in the Prometheus text format (served by rpc/metrics_server.h).
// Hot paths only touch relaxed atomics: no lock, no allocation. Registration
// takes the registry mutex once; the returned reference stays valid for the
// life of the process (metrics are never unregistered).
// Names follow Prometheus conventions with the unit last
// (weft_rpc_latency_us, weft_storage_bytes_written_total).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
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
  Entry* find_or_add(Kind kind, const std::string& name, const std::string& help, const Labels& labels);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
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
