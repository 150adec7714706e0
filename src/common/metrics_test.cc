#include "common/metrics.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
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

// A series named after something that went away (a removed node) is removed
// whole: it leaves the text and the count, and asked for again it is new.
// Other series, of the same family or another kind, stay.
TEST(Registry, RemovedSeriesLeaveTheTextAndComeBackNew) {
  Registry r;
  r.gauge("weft_test_age_ms", "Age", {{"node", "1"}}).set(5);
  r.gauge("weft_test_age_ms", "Age", {{"node", "2"}}).set(7);
  r.counter("weft_test_beats_total", "Beats", {{"node", "1"}}).inc(3);
  int owner = 0;
  r.gauge_fn("weft_test_age_ms", "Age", {{"node", "3"}}, [] { return 9.0; }, &owner);
  ASSERT_EQ(r.size(), 4u);

  EXPECT_TRUE(r.remove("weft_test_age_ms", {{"node", "1"}}));
  EXPECT_FALSE(r.remove("weft_test_age_ms", {{"node", "1"}})) << "gone already";
  EXPECT_FALSE(r.remove("weft_test_age_ms", {{"node", "3"}})) << "a gauge_fn goes with remove_callbacks";
  EXPECT_FALSE(r.remove("weft_test_age_ms", {})) << "another series";
  EXPECT_EQ(r.size(), 3u);
  std::string text = r.prometheus_text();
  EXPECT_EQ(text.find("weft_test_age_ms{node=\"1\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_age_ms{node=\"2\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_age_ms{node=\"3\"} 9"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_test_beats_total{node=\"1\"} 3"), std::string::npos) << "another name: kept";

  EXPECT_TRUE(r.remove("weft_test_beats_total", {{"node", "1"}}));
  EXPECT_EQ(r.counter("weft_test_beats_total", "Beats", {{"node", "1"}}).value(), 0u) << "a new series";
  EXPECT_EQ(r.gauge("weft_test_age_ms", "Age", {{"node", "1"}}).value(), 0);
  EXPECT_EQ(r.size(), 4u);
  r.remove_callbacks(&owner);
  EXPECT_EQ(r.size(), 3u);
}

// mgmtd makes a gauge per chain: 32,768 for a full table, under its state
// lock. Each is found again as the same object (the index distinguishes the
// kind: a counter of the same name and labels is another series), and the
// text lists a family's series in registration order, as before the index.
// Prints the time taken (not asserted: it depends on the machine).
TEST(Registry, ManyLabelledSeriesAreFoundAgainAndRenderedInRegistrationOrder) {
  constexpr int kSeries = 32768;
  Registry r;
  std::vector<Gauge*> gauges;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSeries; ++i) {
    gauges.push_back(&r.gauge("weft_test_chain_version", "Version", {{"chain", std::to_string(i)}}));
    gauges.back()->set(i);
  }
  const auto created = std::chrono::steady_clock::now();
  for (int i = 0; i < kSeries; ++i)
    ASSERT_EQ(&r.gauge("weft_test_chain_version", "Version", {{"chain", std::to_string(i)}}), gauges[i]) << i;
  const auto found = std::chrono::steady_clock::now();
  std::printf("%d labelled gauges created in %.1f ms, found again in %.1f ms\n", kSeries,
              std::chrono::duration<double, std::milli>(created - start).count(),
              std::chrono::duration<double, std::milli>(found - created).count());
  Counter& same_name = r.counter("weft_test_chain_version", "Version", {{"chain", "7"}});
  EXPECT_NE(static_cast<void*>(&same_name), static_cast<void*>(gauges[7]));
  EXPECT_EQ(r.size(), static_cast<size_t>(kSeries) + 1);

  const std::string text = r.prometheus_text();
  size_t at = 0;
  for (int i : {0, 1, 2, 9, 10, 11, 100, 1000, 32767}) {  // numeric, not text order ("10" < "2")
    const size_t next = text.find(fmt::format("weft_test_chain_version{{chain=\"{}\"}} {}\n", i, i), at);
    ASSERT_NE(next, std::string::npos) << "chain " << i << " missing or out of order";
    at = next;
  }
}

}  // namespace
}  // namespace weft::metrics
