// What ReadHolder sends meta and when (client/read_holder.h), with a fake meta.
#include "client/read_holder.h"

#include <gtest/gtest.h>

#include <vector>

namespace weft::client {
namespace {

using namespace std::chrono_literals;
using meta::Ino;

struct FakeMeta {
  std::vector<std::vector<Ino>> sent;
  std::vector<std::chrono::milliseconds> timeouts;
  std::vector<uint64_t> seqs;
  Result<std::chrono::milliseconds> answer = 1250ms;
  std::vector<Ino> open;
  ReadHolder holder{[this](std::span<const Ino> inos, std::chrono::milliseconds timeout, uint64_t seq)
                        -> Result<std::chrono::milliseconds> {
                      sent.emplace_back(inos.begin(), inos.end());
                      timeouts.push_back(timeout);
                      seqs.push_back(seq);
                      return answer;
                    },
                    [this] { return open; }};
};

TEST(ReadHolder, NamesEachOpenInodeOnceAtMetasInterval) {
  FakeMeta m;
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kDefault) << "nothing open, nothing held: nothing sent";
  EXPECT_TRUE(m.sent.empty());
  m.open = {9, 3, 9, 4};
  EXPECT_EQ(m.holder.renew_once(), 1250ms);
  ASSERT_EQ(m.sent.size(), 1u);
  EXPECT_EQ(m.sent[0], (std::vector<Ino>{3, 4, 9}));
  // Closed everything: meta is told once (the holds go at once, not at expiry).
  m.open.clear();
  EXPECT_EQ(m.holder.renew_once(), 1250ms);
  ASSERT_EQ(m.sent.size(), 2u);
  EXPECT_TRUE(m.sent[1].empty());
  EXPECT_EQ(m.holder.renew_once(), 1250ms);
  EXPECT_EQ(m.sent.size(), 2u) << "meta already knows nothing is open";
}

// A renewal waits at most an interval for meta (never less than kTimeoutMin).
TEST(ReadHolder, ARenewalWaitsAtMostAnIntervalForMeta) {
  FakeMeta m;
  m.open = {1};
  m.holder.renew_once();
  EXPECT_EQ(m.timeouts.back(), ReadHolder::kDefault) << "before meta said, the default interval";
  m.holder.renew_once();
  EXPECT_EQ(m.timeouts.back(), 1250ms);
  m.answer = 100ms;
  m.holder.renew_once();
  m.holder.renew_once();
  EXPECT_EQ(m.timeouts.back(), ReadHolder::kTimeoutMin) << "never shorter than this";
}

TEST(ReadHolder, AFailedRenewalIsTriedAgainSoonAndARefusedOneAfterTheInterval) {
  FakeMeta m;
  m.open = {1};
  m.answer = std::unexpected(Status(Code::kUnavailable, "meta is restarting"));
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kRetry);
  m.answer = 2000ms;
  EXPECT_EQ(m.holder.renew_once(), 2000ms);
  m.answer = std::unexpected(Status(Code::kTimeout, "slow"));
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kRetry);
  m.answer = std::unexpected(Status(Code::kOverloaded, "too many holds"));
  EXPECT_EQ(m.holder.renew_once(), 2000ms) << "meta said no: asking at once only adds load";
  m.answer = std::unexpected(Status(Code::kTooBig, "too many inodes"));
  EXPECT_EQ(m.holder.renew_once(), 2000ms);
  EXPECT_EQ(m.sent.size(), 5u);
}

// A renewal interval past what any meta asks is kept within bounds: 1 ms
// had this thread call meta a thousand times a second.
TEST(ReadHolder, MetasIntervalIsKeptWithinBounds) {
  FakeMeta m;
  m.open = {1};
  m.answer = 1ms;
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kTimeoutMin);
  m.answer = std::chrono::milliseconds(UINT32_MAX);
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kIdle);
}

TEST(ReadHolder, AMetaThatKeepsNoHoldsIsAskedRarely) {
  FakeMeta m;
  m.open = {1};
  m.answer = 0ms;
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kIdle);
  m.answer = std::unexpected(Status(Code::kUnknownMethod, "meta.hold_reads"));
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kIdle) << "a meta from before read holds";
  m.open.clear();
  EXPECT_EQ(m.holder.renew_once(), ReadHolder::kIdle);
  EXPECT_EQ(m.sent.size(), 2u) << "nothing to release at a meta that held nothing";
}

TEST(ReadHolder, ARenewalNamesAtMostWhatMetaAccepts) {
  FakeMeta m;
  for (Ino i = 1; i <= ReadHolder::kInodesMax + 10; ++i) m.open.push_back(i);
  m.holder.renew_once();
  ASSERT_EQ(m.sent.size(), 1u);
  EXPECT_EQ(m.sent[0].size(), ReadHolder::kInodesMax);
}

TEST(ReadHolder, StopReleasesWhatMetaHolds) {
  FakeMeta m;
  m.open = {5, 6};
  m.holder.renew_once();
  m.open = {6};
  m.holder.renew_once();
  m.holder.stop();
  ASSERT_EQ(m.sent.size(), 3u);
  EXPECT_TRUE(m.sent[2].empty()) << "the holds go at once, not after the hold";
  EXPECT_EQ(m.timeouts[2], ReadHolder::kTimeoutMin);
  EXPECT_EQ(m.seqs, (std::vector<uint64_t>{1, 2, 3})) << "numbered in order, the release last";
  m.holder.stop();
  EXPECT_EQ(m.sent.size(), 3u) << "released once";
}

TEST(ReadHolder, StopReleasesAfterARefusedRenewal) {
  FakeMeta m;
  m.open = {5};
  m.holder.renew_once();
  m.open = {5, 6};
  m.answer = std::unexpected(Status(Code::kOverloaded, "too many holds"));
  m.holder.renew_once();  // refused: meta keeps holding {5}
  m.answer = 1250ms;
  m.holder.stop();
  ASSERT_EQ(m.sent.size(), 3u);
  EXPECT_TRUE(m.sent[2].empty());
}

TEST(ReadHolder, StopDoesNotWaitForAMetaThatStoppedAnswering) {
  FakeMeta m;
  m.open = {5};
  m.holder.renew_once();
  m.answer = std::unexpected(Status(Code::kTimeout, "meta out of reach"));
  m.holder.renew_once();
  m.holder.stop();
  EXPECT_EQ(m.sent.size(), 2u) << "the holds expire at meta instead";
}

TEST(ReadHolder, StopSendsNothingWhenMetaHoldsNothing) {
  FakeMeta m;
  m.holder.stop();
  EXPECT_TRUE(m.sent.empty()) << "never held anything";
  m.open = {5};
  m.holder.renew_once();
  m.open.clear();
  m.holder.renew_once();  // told meta it holds nothing
  m.holder.stop();
  EXPECT_EQ(m.sent.size(), 2u);
}

}  // namespace
}  // namespace weft::client
