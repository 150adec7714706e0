#include "mgmt/render.h"

#include <gtest/gtest.h>

#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;

RoutingInfo sample(TimePoint now) {
  RoutingInfo r;
  r.version = 12;
  r.nodes[1] = NodeInfo{.id = 1, .kind = NodeKind::kStorage, .address = "10.0.0.1:9000", .incarnation = 3,
                        .state = NodeState::kUp, .lease_expiry = now + 7500ms};
  r.nodes[2] = NodeInfo{.id = 2, .kind = NodeKind::kStorage, .address = "we\"ird\\host\n:1", .incarnation = 1,
                        .state = NodeState::kDown, .lease_expiry = now - 2s};
  r.targets[1] = TargetInfo{.id = 1, .node_id = 1, .name = "ssd0", .state = TargetState::kServing,
                            .capacity_bytes = 4ull << 30, .used_bytes = 1ull << 30};
  r.targets[2] = TargetInfo{.id = 2, .node_id = 2, .name = "ssd\t1", .state = TargetState::kOffline,
                            .capacity_bytes = 100, .used_bytes = 200};
  r.tables[1] = ChainTableInfo{.id = 1, .replicas = 2, .chains = {5}};
  r.chains[5] = ChainInfo{.id = 5, .table_id = 1, .version = 4,
                          .entries = {{1, TargetState::kServing}, {2, TargetState::kOffline}}};
  return r;
}

TEST(Render, TextShowsNodesTargetsAndChains) {
  ManualClock clock;
  std::string text = render_text(sample(clock.now()), clock.now());
  EXPECT_NE(text.find("routing version 12"), std::string::npos) << text;
  EXPECT_NE(text.find("10.0.0.1:9000"), std::string::npos);
  EXPECT_NE(text.find("7.5s"), std::string::npos);
  EXPECT_NE(text.find("1.0 GiB"), std::string::npos) << "used";
  EXPECT_NE(text.find("3.0 GiB"), std::string::npos) << "free";
  EXPECT_NE(text.find("1(serving) -> 2(offline)"), std::string::npos) << text;
  EXPECT_NE(text.find("chains (1)"), std::string::npos);
  // Columns line up: the state of target 1 starts under the targets table's STATE header.
  auto column_in_line = [&](std::string_view needle, std::string_view in_line_with) {
    size_t at = text.find(in_line_with);
    size_t line = text.rfind('\n', at) + 1;
    return text.substr(line, text.find('\n', at) - line).find(needle);
  };
  EXPECT_EQ(column_in_line("STATE", "NAME"), column_in_line("serving", "ssd0")) << text;
  EXPECT_EQ(column_in_line("CHAINS", "NAME"), column_in_line("1       1.0 GiB", "ssd0")) << "in one chain\n" << text;
}

TEST(Render, SpareTargetsShowInNoChain) {
  ManualClock clock;
  RoutingInfo r = sample(clock.now());
  r.targets[3] = TargetInfo{.id = 3, .node_id = 1, .name = "spare", .state = TargetState::kServing};
  std::string json = render_json(r, clock.now());
  EXPECT_NE(json.find("\"name\":\"ssd0\",\"state\":\"serving\",\"chains\":1,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"name\":\"spare\",\"state\":\"serving\",\"chains\":0,"), std::string::npos) << json;
}

TEST(Render, JsonIsEscapedAndComplete) {
  ManualClock clock;
  std::string json = render_json(sample(clock.now()), clock.now());
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_NE(json.find("\"routing_version\":12"), std::string::npos) << json;
  EXPECT_NE(json.find("\"address\":\"we\\\"ird\\\\host\\n:1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"name\":\"ssd\\t1\""), std::string::npos);
  EXPECT_NE(json.find("\"lease_left_ms\":7500"), std::string::npos);
  EXPECT_NE(json.find("\"lease_left_ms\":-2000"), std::string::npos);
  EXPECT_NE(json.find("\"free_bytes\":0"), std::string::npos) << "used above capacity clamps to 0";
  EXPECT_NE(json.find("\"chains\":[5]"), std::string::npos);
  EXPECT_NE(json.find("{\"id\":5,\"table_id\":1,\"version\":4,\"writable\":true,\"targets\":[{\"target_id\":1,"
                      "\"state\":\"serving\"},{\"target_id\":2,\"state\":\"offline\"}]}"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.find('\n'), std::string::npos) << "raw control characters never appear";
  EXPECT_EQ(json.find('\t'), std::string::npos);
}

// `weft status` shows the cluster's meta store as mgmtd recorded it.
TEST(Render, TheMetaStoreMgmtdRecordedIsShown) {
  ManualClock clock;
  const RoutingInfo r = sample(clock.now());
  const MetaStoreRecord store{.store_id = 0xabc, .ids_issued_below = (uint64_t{1} << 32) + 5000};
  std::string text = render_text(r, clock.now(), {}, store);
  EXPECT_NE(text.find("\nmeta store: 0000000000000abc (inode ids issued below 4294972296)\n"), std::string::npos)
      << text;
  std::string json = render_json(r, clock.now(), {}, store);
  EXPECT_NE(json.find("\"meta_store\":{\"id\":\"0000000000000abc\",\"ids_issued_below\":4294972296},"),
            std::string::npos)
      << json;
  EXPECT_NE(render_text(r, clock.now()).find("\nmeta store: none recorded\n"), std::string::npos);
  EXPECT_NE(render_json(r, clock.now()).find("\"meta_store\":null,"), std::string::npos);
}

TEST(Render, EscapesAndBytes) {
  EXPECT_EQ(json_escape("a\"b\\c\x01\x7f"), "a\\\"b\\\\c\\u0001\\u007f");
  EXPECT_EQ(json_escape("üñí"), "üñí") << "UTF-8 passes through";
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(5ull << 40), "5.0 TiB");
}

TEST(Render, UnavailableChainIsFlagged) {
  ManualClock clock;
  RoutingInfo r = sample(clock.now());
  r.chains[5].entries = {{1, TargetState::kLastServing}, {2, TargetState::kOffline}};
  EXPECT_NE(render_json(r, clock.now()).find("\"writable\":false"), std::string::npos);
  EXPECT_NE(render_text(r, clock.now()).find(" NO "), std::string::npos);
}

}  // namespace
}  // namespace weft::mgmt
