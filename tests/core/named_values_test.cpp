// core/named_values.h: one table gives an enumeration's names, their parse and the parse error.
#include "core/named_values.h"

#include <gtest/gtest.h>

namespace ntp {
namespace {

enum class Color { kRed, kGreen, kBlue, kUnlisted };
constexpr NamedValue<Color> kColors[] = {
    {Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}};
constexpr NamedValue<Color> kOne[] = {{Color::kRed, "red"}};

TEST(NamedValuesTest, NamesAndValuesAreTheTablesBothWays) {
  for (const NamedValue<Color>& entry : kColors) {
    EXPECT_STREQ(name_of(kColors, entry.value), entry.name);
    EXPECT_EQ(value_named(kColors, entry.name), entry.value);
  }
  static_assert(value_named(kColors, "blue") == Color::kBlue);  // usable at compile time
  EXPECT_STREQ(name_of(kColors, Color::kUnlisted), "?");
  EXPECT_STREQ(name_of(kColors, Color::kUnlisted, "none"), "none");
  EXPECT_EQ(value_named(kColors, "Red"), std::nullopt);  // exact: case-sensitive
  EXPECT_EQ(value_named(kColors, ""), std::nullopt);
}

TEST(NamedValuesTest, AnUnknownNameIsRejectedNamingTheFlagTheTextAndEveryChoice) {
  EXPECT_EQ(parse_named(kColors, "--color", "green").value(), Color::kGreen);
  const Status bad = parse_named(kColors, "--color", "mauve").status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "--color 'mauve' is unknown; use red, green or blue");
  EXPECT_EQ(name_choices(kOne), "red");
  EXPECT_EQ(name_choices(kColors), "red, green or blue");
}

}  // namespace
}  // namespace ntp
