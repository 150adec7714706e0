#include "mgmt/client_table.h"

#include <gtest/gtest.h>

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;

struct ClientTableTest : ::testing::Test {
  ManualClock clock;
  metrics::Registry registry;
  ClientTable table{LeaseConfig{.lease = 30s, .grace = 10s}, clock, registry};
};

TEST_F(ClientTableTest, HeartbeatRegistersOnceAndRenews) {
  ASSERT_EQ(*table.heartbeat(7, "host:1:weft"), 30s);
  clock.advance(5s);
  ASSERT_TRUE(table.heartbeat(7, "host:1:weft").has_value());
  ClientList list = table.list();
  ASSERT_EQ(list.clients.size(), 1u) << "a heartbeat from a known id renews, it does not add";
  EXPECT_EQ(list.clients[0].label, "host:1:weft");
  EXPECT_EQ(list.clients[0].last_heartbeat - list.clients[0].first_seen, 5s);
  EXPECT_EQ(list.clients[0].lease_expiry, list.clients[0].last_heartbeat + 30s);
}

TEST_F(ClientTableTest, ExpiresOnlyAfterLeasePlusGrace) {
  ASSERT_TRUE(table.heartbeat(1, "a").has_value());
  ASSERT_TRUE(table.heartbeat(2, "b").has_value());
  clock.advance(20s);
  ASSERT_TRUE(table.heartbeat(2, "b").has_value());
  clock.advance(20s - 1ns);  // client 1: 40 s - 1 ns after its heartbeat
  EXPECT_EQ(table.expire(), 0u);
  clock.advance(1ns);
  EXPECT_EQ(table.expire(), 1u);
  ClientList list = table.list();
  ASSERT_EQ(list.clients.size(), 1u);
  EXPECT_EQ(list.clients[0].id, 2u);
  ASSERT_TRUE(table.heartbeat(1, "a").has_value()) << "an expired client comes back with its next heartbeat";
  EXPECT_EQ(table.list().clients.size(), 2u);
}

// A check that runs late (mgmtd stalled) excuses the stall: a client whose
// heartbeats queued behind it keeps its lease; one silent for a full lease
// and grace of checks on time still goes.
TEST_F(ClientTableTest, ALateCheckExcusesTheStallInsteadOfExpiringLiveClients) {
  ASSERT_TRUE(table.heartbeat(1, "a").has_value());
  clock.advance(1s);
  EXPECT_EQ(table.expire(1s), 0u);
  clock.advance(60s);  // no check ran for a minute
  EXPECT_EQ(table.expire(1s), 0u) << "a live client lost its lease to mgmtd's own stall";
  for (int i = 0; i < 37; ++i) {  // the excused heartbeat is 2 s old now: 38 s more to lease + grace
    clock.advance(1s);
    EXPECT_EQ(table.expire(1s), 0u) << i;
  }
  clock.advance(1s);
  EXPECT_EQ(table.expire(1s), 1u);
}

TEST_F(ClientTableTest, ListIsCompleteOnlyAfterAFullLeaseAndGrace) {
  EXPECT_FALSE(table.list().complete) << "a fresh mgmtd cannot know which clients hold leases";
  clock.advance(40s - 1ns);
  EXPECT_FALSE(table.list().complete);
  clock.advance(1ns);
  EXPECT_TRUE(table.list().complete);
}

TEST_F(ClientTableTest, RejectsBadInput) {
  EXPECT_EQ(table.heartbeat(0, "x").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(table.heartbeat(1, std::string(kClientLabelBytesMax + 1, 'a')).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(table.heartbeat(1, std::string("a\nb")).error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(table.heartbeat(1, std::string(kClientLabelBytesMax, 'a')).has_value());
  EXPECT_TRUE(table.list().clients.size() == 1);
}

TEST_F(ClientTableTest, ListIsOrderedById) {
  for (uint64_t id : {5, 3, 9, 1}) ASSERT_TRUE(table.heartbeat(id, "c").has_value());
  std::vector<uint64_t> ids;
  for (const auto& c : table.list().clients) ids.push_back(c.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 3, 5, 9}));
}

TEST_F(ClientTableTest, ListPagesFromAnIdOn) {
  for (uint64_t id : {5, 3, 9, 1, 7}) ASSERT_TRUE(table.heartbeat(id, "c").has_value());
  auto ids_of = [](const ClientList& l) {
    std::vector<uint64_t> ids;
    for (const auto& c : l.clients) ids.push_back(c.id);
    return ids;
  };
  ClientList first = table.list(0, 2);
  EXPECT_EQ(ids_of(first), (std::vector<uint64_t>{1, 3}));
  EXPECT_TRUE(first.more);
  // A client that comes or goes between pages moves nothing: the next page starts past an id.
  ASSERT_TRUE(table.heartbeat(2, "late").has_value());
  ClientList second = table.list(3, 2);
  EXPECT_EQ(ids_of(second), (std::vector<uint64_t>{5, 7}));
  EXPECT_TRUE(second.more);
  ClientList last = table.list(7, 2);
  EXPECT_EQ(ids_of(last), (std::vector<uint64_t>{9}));
  EXPECT_FALSE(last.more);
  EXPECT_FALSE(table.list(7, 1).more);
  EXPECT_TRUE(table.list(UINT64_MAX).clients.empty());
  EXPECT_FALSE(table.list(UINT64_MAX).more);
}

}  // namespace
}  // namespace weft::mgmt
