// Expiry of retry records (MetaStore::expire_requests).
#include <chrono>

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/perf_context.h>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

// Writes `records` retry records (seq 1..records) for each of `clients`
// clients straight into the store, each as old as `time_ns` says.
void put_records(rocksdb::DB& db, uint64_t clients, uint64_t records, int64_t time_ns) {
  RequestRecord rec;
  rec.reply = reply_of(Inode{.ino = 12345, .mode = 0644, .nlink = 1, .mtime_ns = time_ns});
  rec.time_ns = time_ns;
  const std::string value = encode_request(rec);
  for (uint64_t c = 1; c <= clients; ++c) {
    rocksdb::WriteBatch batch;
    for (uint64_t seq = 1; seq <= records; ++seq) batch.Put(key::request(c, seq), value);
    ASSERT_TRUE(db.Write(rocksdb::WriteOptions(), &batch).ok());
  }
}

// One full pass of expiry: the records removed.
uint64_t expire_all(MetaStore& s, int64_t age_ns) {
  uint64_t removed = 0;
  for (;;) {
    auto r = s.expire_requests(age_ns);
    EXPECT_TRUE(r.has_value()) << r.error();
    if (!r) return removed;
    removed += r->removed;
    if (r->pass_done) return removed;
  }
}

constexpr int64_t kHourNs = int64_t{3600} * 1'000'000'000;

class RequestExpiryTest : public StoreTest {
 protected:
  StoreOptions options() override {
    StoreOptions o = StoreTest::options();
    o.clock = &clock_;
    o.before_expiring_client = [this](uint64_t client) {
      if (before_expiring_) before_expiring_(client);
    };
    return o;
  }
  // A mutation of `client` numbered `seq` (a create, so it leaves a record).
  Result<Reply> mutate(uint64_t client, uint64_t seq) {
    return s().create(with_req(root(), client, seq), kRootIno, fmt::format("c{}-{}", client, seq), 0644, true, false);
  }
  void mutations(uint64_t client, uint64_t first, uint64_t last) {
    for (uint64_t seq = first; seq <= last; ++seq) ASSERT_OK(mutate(client, seq));
  }
  size_t records_of(uint64_t client) {
    std::string prefix = key::request_prefix(client);
    std::unique_ptr<rocksdb::Iterator> it(s().db()->NewIterator(rocksdb::ReadOptions()));
    size_t n = 0;
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) ++n;
    return n;
  }
  // A retry answered from its record returns what the mutation returned;
  // one that executes again finds the file it created: kExists.
  bool replayed(uint64_t client, uint64_t seq) { return mutate(client, seq).has_value(); }

  ManualClock clock_;
  std::function<void(uint64_t)> before_expiring_;
};

// Expiry goes by client: all records of a client whose newest one is older
// than the age go; a client with a newer one keeps all of its (older ones too).
TEST_F(RequestExpiryTest, IdleClientsLoseAllRecordsActiveClientsKeepAll) {
  ASSERT_NO_FATAL_FAILURE(mutations(1, 1, 3));
  ASSERT_NO_FATAL_FAILURE(mutations(2, 1, 3));
  ASSERT_NO_FATAL_FAILURE(mutations(4, 1, 3));
  clock_.advance(std::chrono::hours(2));
  ASSERT_NO_FATAL_FAILURE(mutations(3, 1, 3));
  ASSERT_NO_FATAL_FAILURE(mutations(4, 4, 4));  // client 4 is back
  auto r = s().expire_requests(kHourNs);
  ASSERT_OK(r);
  EXPECT_TRUE(r->pass_done);
  EXPECT_EQ(r->clients, 4u);
  EXPECT_EQ(r->removed, 6u);
  EXPECT_EQ(records_of(1), 0u);
  EXPECT_EQ(records_of(2), 0u);
  EXPECT_EQ(records_of(3), 3u);
  EXPECT_EQ(records_of(4), 4u);
  EXPECT_TRUE(replayed(4, 1)) << "an active client's retry of an old request is answered from its record";
  EXPECT_TRUE(replayed(3, 3));
  EXPECT_FALSE(replayed(1, 3)) << "an expired client's retry executes again";
}

// A client found idle that writes before its records are deleted keeps the
// new record: only what the sweep saw, up to the newest seq it saw, goes.
TEST_F(RequestExpiryTest, ClientWritingDuringExpiryKeepsItsNewRecord) {
  ASSERT_NO_FATAL_FAILURE(mutations(5, 1, 3));
  ASSERT_NO_FATAL_FAILURE(mutations(6, 1, 3));
  clock_.advance(std::chrono::hours(2));
  int hooked = 0;
  before_expiring_ = [&](uint64_t client) {
    ++hooked;
    if (client == 5) ASSERT_OK(mutate(5, 4));  // back, between the check and the delete
  };
  EXPECT_EQ(expire_all(s(), kHourNs), 6u);
  EXPECT_EQ(hooked, 2);
  EXPECT_EQ(records_of(5), 1u);
  EXPECT_EQ(records_of(6), 0u);
  EXPECT_TRUE(replayed(5, 4)) << "the record written during expiry answers its retry";
  before_expiring_ = nullptr;
  EXPECT_EQ(expire_all(s(), kHourNs), 0u) << "client 5 is active now";
}

// With a budget of a few steps per call, calls resume where the last one
// stopped (inside a client too) and a pass reaches every client.
TEST_F(RequestExpiryTest, CursorResumesOverCallsWithASmallBudget) {
  for (uint64_t c = 1; c <= 10; ++c) ASSERT_NO_FATAL_FAILURE(mutations(c, 1, 3));
  clock_.advance(std::chrono::hours(2));
  // Active clients at the top: a sweep that started over every call would
  // look at them and never reach the idle ones below.
  for (uint64_t c = 100; c < 105; ++c) ASSERT_NO_FATAL_FAILURE(mutations(c, 1, 2));
  const ExpireLimits limits{.steps_max = 4, .batch_deletes_max = 2};
  int calls = 0;
  uint64_t removed = 0;
  for (bool done = false; !done && calls < 100; ++calls) {
    auto r = s().expire_requests(kHourNs, limits);
    ASSERT_OK(r);
    EXPECT_LE(r->clients + r->removed, limits.steps_max);
    // Every call gets on; the last may only find the end.
    EXPECT_TRUE(r->pass_done || r->clients + r->removed > 0);
    removed += r->removed;
    done = r->pass_done;
  }
  EXPECT_EQ(removed, 30u);
  EXPECT_GE(calls, 45 / 4);  // 15 clients and 30 records, 4 steps a call
  EXPECT_LE(calls, 20);
  for (uint64_t c = 1; c <= 10; ++c) EXPECT_EQ(records_of(c), 0u) << c;
  for (uint64_t c = 100; c < 105; ++c) EXPECT_EQ(records_of(c), 2u) << c;
  // The next pass starts over from the top.
  auto again = s().expire_requests(kHourNs, limits);
  ASSERT_OK(again);
  EXPECT_EQ(again->clients, 4u);
}

// The cost of a pass is per client, plus the records of clients that went
// away: the records of active clients are not read. RocksDB's perf context
// counts the entries the iterator stepped over (every Next or Prev is one);
// a pass reading every record steps over all 10,400.
TEST_F(RequestExpiryTest, LooksAtClientsNotRecords) {
  constexpr uint64_t kActive = 50, kIdle = 2, kRecords = 200;
  ASSERT_NO_FATAL_FAILURE(put_records(*s().db(), kIdle, kRecords, clock_.wall_ns()));
  clock_.advance(std::chrono::hours(2));
  rocksdb::DB& db = *s().db();
  for (uint64_t c = kIdle + 1; c <= kIdle + kActive; ++c) {
    rocksdb::WriteBatch batch;  // put_records numbers clients from 1: write these by hand
    RequestRecord rec{.time_ns = clock_.wall_ns()};
    for (uint64_t seq = 1; seq <= kRecords; ++seq) batch.Put(key::request(c, seq), encode_request(rec));
    ASSERT_TRUE(db.Write(rocksdb::WriteOptions(), &batch).ok());
  }
  ASSERT_TRUE(db.Flush(rocksdb::FlushOptions()).ok());
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  auto r = s().expire_requests(kHourNs);
  uint64_t stepped = rocksdb::get_perf_context()->internal_key_skipped_count;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  ASSERT_OK(r);
  EXPECT_TRUE(r->pass_done);
  EXPECT_EQ(r->clients, kActive + kIdle);
  EXPECT_EQ(r->removed, kIdle * kRecords);
  // The idle clients' records, walked to delete them, and a few per client.
  EXPECT_LE(stepped, kIdle * kRecords + 2 * (kActive + kIdle)) << "stepped over " << stepped;
}

// A pass that removed many records compacts their range: the next pass does
// not step over their tombstones (it would, every pass, until compaction got
// there by itself).
TEST_F(RequestExpiryTest, ALargeRemovalIsCompactedAway) {
  constexpr uint64_t kIdle = 20, kRecords = 512;  // 10,240 records: past compact_after_removed
  ASSERT_NO_FATAL_FAILURE(put_records(*s().db(), kIdle, kRecords, clock_.wall_ns()));
  ASSERT_TRUE(s().db()->Flush(rocksdb::FlushOptions()).ok());
  clock_.advance(std::chrono::hours(2));
  EXPECT_EQ(expire_all(s(), kHourNs), kIdle * kRecords);
  ASSERT_NO_FATAL_FAILURE(mutations(kIdle + 1, 1, 1));  // one live client, above the removed ones
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  EXPECT_EQ(expire_all(s(), kHourNs), 0u);
  uint64_t skipped = rocksdb::get_perf_context()->internal_delete_skipped_count +
                     rocksdb::get_perf_context()->internal_key_skipped_count;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  EXPECT_LT(skipped, 100u) << "the next pass stepped over the removed records' tombstones";
}

// A retry-record key of the wrong length (only damage makes one) is removed
// like an undecodable record; it does not stop the passes at it.
TEST_F(RequestExpiryTest, AMalformedKeyIsRemovedNotAWall) {
  ASSERT_NO_FATAL_FAILURE(mutations(1, 1, 2));
  clock_.advance(std::chrono::hours(2));
  std::string bad = key::request(1, 7) + "x";  // above client 1's records
  ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), bad, "junk").ok());
  EXPECT_EQ(expire_all(s(), kHourNs), 3u);
  EXPECT_EQ(records_of(1), 0u);
}

// Timings for docs/BENCHMARKS.md:
//   build/release/src/meta/meta_store_test --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Bench*'
TEST_F(RequestExpiryTest, DISABLED_BenchTwoThousandClients) {
  constexpr uint64_t kClients = 2000, kRecords = 1024;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(put_records(*s().db(), kClients, kRecords, clock_.wall_ns()));
  ASSERT_TRUE(s().db()->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
  fmt::print("populated {} clients x {} records in {:.1f} s\n", kClients, kRecords,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  auto timed = [&](const char* what) {
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
    rocksdb::get_perf_context()->Reset();
    using Ms = std::chrono::duration<double, std::milli>;
    uint64_t removed = 0, calls = 0;
    Ms total{0}, longest{0};
    for (bool done = false; !done; ++calls) {
      auto start = std::chrono::steady_clock::now();
      auto r = s().expire_requests(kHourNs);
      Ms took = std::chrono::steady_clock::now() - start;
      ASSERT_OK(r);
      total += took;
      longest = std::max(longest, took);
      removed += r->removed;
      done = r->pass_done;
    }
    fmt::print("{}: {:.1f} ms in {} calls (longest {:.1f} ms), {} records removed, iterator stepped over {} entries\n",
               what, total.count(), calls, longest.count(), removed,
               rocksdb::get_perf_context()->internal_key_skipped_count);
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  };
  timed("all clients active (a pass removes nothing)");
  clock_.advance(std::chrono::hours(2));
  timed("all clients gone (a pass removes every record)");
}

}  // namespace
}  // namespace weft::meta::testing
