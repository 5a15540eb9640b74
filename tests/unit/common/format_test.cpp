// coach::format: the placeholders log and error messages use.
#include "common/format.hpp"

#include <gtest/gtest.h>

namespace {

TEST(format, fills_placeholders_in_order_and_prints_braces) {
  EXPECT_EQ(coach::format("shard {} of {}", 1, 4), "shard 1 of 4");
  EXPECT_EQ(coach::format("{{}} {}", "x"), "{} x");
  EXPECT_EQ(coach::format("{} and {}", 1), "1 and {}") << "a placeholder without an argument";
  EXPECT_EQ(coach::format("{}", static_cast<unsigned char>(7)), "7");
}

TEST(format, fixed_decimals_spec_rounds_numbers) {
  // The recovery log line once printed a literal "{:.1f}" here.
  EXPECT_EQ(coach::format("({:.1f} s of work lost)", 12.04), "(12.0 s of work lost)");
  EXPECT_EQ(coach::format("accuracy {:.4f}", 0.912345), "accuracy 0.9123");
  EXPECT_EQ(coach::format("{:.0f}", 2.6), "3");
  EXPECT_EQ(coach::format("{:.2f} then {}", 3, 0.5), "3.00 then 0.5")
      << "the spec applies to its own argument only";
}

TEST(format, other_specs_print_the_argument_plainly) {
  EXPECT_EQ(coach::format("{:>8}", "ab"), "ab");
  EXPECT_EQ(coach::format("{:.3f}", "text"), "text");
  EXPECT_EQ(coach::format("open {: brace", 1), "open {: brace") << "no closing brace";
}

}  // namespace
