#include "common/status.h"
#include "common/wire_status.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return error(Code::kInvalidArgument, "{} is not positive", v);
  return v;
}

Result<int> doubled(int v) {
  WEFT_TRY(int x, parse_positive(v));
  return 2 * x;
}

Result<void> check(int v) {
  WEFT_RETURN_IF_ERROR(parse_positive(v));
  return {};
}

TEST(Status, CodesCarryErrnoAndRetryable) {
  EXPECT_EQ(code_errno(Code::kNotFound), ENOENT);
  EXPECT_EQ(code_errno(Code::kNameTooLong), ENAMETOOLONG);
  EXPECT_TRUE(code_retryable(Code::kTimeout));
  EXPECT_TRUE(code_retryable(Code::kStaleRouting));
  EXPECT_FALSE(code_retryable(Code::kCorruption));
  EXPECT_FALSE(code_retryable(Code::kNotFound));
  EXPECT_EQ(code_name(Code::kExists), "kExists");
}

TEST(Status, WireValuesRoundTripAndUnknownIsInternal) {
  EXPECT_EQ(code_from_wire(static_cast<uint32_t>(Code::kNoSpace)), Code::kNoSpace);
  EXPECT_EQ(code_from_wire(60000), Code::kInternal);
}

// A peer's status: an undefined value is kInternal and named in the message.
TEST(Status, AStatusFromTheWireNamesAnUndefinedCode) {
  Status known = status_from_wire(static_cast<uint32_t>(Code::kNotFound), "no such file");
  EXPECT_EQ(known.code(), Code::kNotFound);
  EXPECT_EQ(known.message(), "no such file");
  Status internal = status_from_wire(static_cast<uint32_t>(Code::kInternal), "broke");
  EXPECT_EQ(internal.message(), "broke");
  Status undefined = status_from_wire(4242, "what");
  EXPECT_EQ(undefined.code(), Code::kInternal);
  EXPECT_EQ(undefined.message(), "undefined code 4242: what");
}

TEST(Status, ErrnoMapping) {
  EXPECT_EQ(code_from_errno(ENOSPC), Code::kNoSpace);
  EXPECT_EQ(code_from_errno(ECONNREFUSED), Code::kUnavailable);
  EXPECT_EQ(code_from_errno(12345), Code::kIoError);
  auto e = errno_error(ENOENT, "open /x");
  EXPECT_EQ(e.error().code(), Code::kNotFound);
  EXPECT_NE(e.error().message().find("open /x"), std::string::npos);
}

TEST(Status, TryPropagates) {
  EXPECT_EQ(doubled(4).value(), 8);
  auto r = doubled(-1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.error().to_string(), "kInvalidArgument: -1 is not positive");
  EXPECT_TRUE(check(1).has_value());
  EXPECT_FALSE(check(0).has_value());
}

TEST(Status, Context) {
  Status s(Code::kIoError, "disk gone");
  EXPECT_EQ(s.with_context("writing chunk 7").message(), "writing chunk 7: disk gone");
  EXPECT_EQ(fmt::format("{}", s), "kIoError: disk gone");
}

}  // namespace
}  // namespace weft
