#include "common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace weft::metrics {
namespace {

TEST(Histogram, BucketsAreMonotonicAndTight) {
  uint64_t prev = 0;
  for (size_t b = 0; b < Histogram::kBuckets; ++b) {
    uint64_t up = Histogram::bucket_upper(b);
    if (b > 0) {
      EXPECT_GT(up, prev) << b;
    }
    prev = up;
  }
  for (uint64_t v : {0ull, 1ull, 3ull, 4ull, 5ull, 7ull, 8ull, 100ull, 1000ull, 123456789ull}) {
    size_t b = Histogram::bucket_of(v);
    EXPECT_LE(v, Histogram::bucket_upper(b)) << v;
    if (b > 0) {
      EXPECT_GT(v, Histogram::bucket_upper(b - 1)) << v;
    }
    EXPECT_LE(static_cast<double>(Histogram::bucket_upper(b)), static_cast<double>(v) * 1.25 + 1) << v;
  }
}

TEST(Histogram, Quantiles) {
  Histogram h;
  for (uint64_t v = 1; v <= 1000; ++v) h.observe(v);
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_EQ(h.sum(), 500500u);
  uint64_t p50 = h.quantile(0.5), p99 = h.quantile(0.99);
  EXPECT_GE(p50, 500u);
  EXPECT_LE(p50, 625u);
  EXPECT_GE(p99, 990u);
  EXPECT_LE(p99, 1250u);
}

TEST(Registry, ConcurrentCountsAreExact) {
  Registry r;
  Counter& c = r.counter("weft_test_ops_total", "ops");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) c.inc();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 400000u);
  EXPECT_EQ(&r.counter("weft_test_ops_total", "ops"), &c);  // same series, same object
}

TEST(Registry, PrometheusText) {
  Registry r;
  r.counter("weft_test_requests_total", "Requests", {{"method", "read"}}).inc(3);
  r.counter("weft_test_requests_total", "Requests", {{"method", "write"}}).inc(1);
  r.gauge("weft_test_depth", "Depth").set(-2);
  r.histogram("weft_test_latency_us", "Latency").observe(10);
  int owner = 0;
  r.gauge_fn("weft_test_free_bytes", "Free", {{"target", "1"}}, [] { return 42.0; }, &owner);
  std::string text = r.prometheus_text();
  EXPECT_NE(text.find("# TYPE weft_test_requests_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_requests_total{method=\"read\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_requests_total{method=\"write\"} 1"), std::string::npos);
  EXPECT_NE(text.find("weft_test_depth -2"), std::string::npos);
  EXPECT_NE(text.find("weft_test_latency_us_bucket{le=\"15\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_latency_us_bucket{le=\"3\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_latency_us_count 1"), std::string::npos);
  EXPECT_NE(text.find("weft_test_free_bytes{target=\"1\"} 42"), std::string::npos);
  r.remove_callbacks(&owner);
  EXPECT_EQ(r.prometheus_text().find("weft_test_free_bytes"), std::string::npos);
}

}  // namespace
}  // namespace weft::metrics
