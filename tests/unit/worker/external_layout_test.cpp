// worker::external_layout: a script's hello read into a layout, and the one line that names how a
// later process's layout differs from the first's.
#include "worker/external_layout.hpp"

#include <gtest/gtest.h>

namespace coach::worker {
namespace {

const char* two_tensors =
    R"({"op":"hello","protocol":1,"samples":100,"test_samples":10,"framework":"torch 2.15",
        "tensors":[{"name":"fc.weight","shape":[10,128],"dtype":"float32","kind":"param"},
                   {"name":"bn.running_mean","shape":[10],"dtype":"float32","kind":"buffer"}]})";

TEST(external_layout, a_hello_gives_the_tensors_in_order_with_their_offsets) {
  auto l = parse_hello(two_tensors);
  ASSERT_TRUE(l) << l.error().to_string();
  ASSERT_EQ(l->tensors.size(), 2u);
  EXPECT_EQ(l->tensors[0].name, "fc.weight");
  EXPECT_EQ(l->tensors[0].offset, 0u);
  EXPECT_EQ(l->tensors[0].size(), 1280u);
  EXPECT_EQ(l->tensors[1].offset, 1280u);
  EXPECT_EQ(l->tensors[1].kind, tensor_kind::buffer);
  EXPECT_EQ(l->floats, 1290u);
  EXPECT_EQ(l->samples, 100u);
  EXPECT_EQ(l->test_samples, 10u);
  EXPECT_EQ(l->framework, "torch 2.15");
  const auto d = script_dataset(*l);
  EXPECT_EQ(d.train.rows, 100u);
  EXPECT_EQ(d.test.rows, 10u);
}

TEST(external_layout, a_bad_hello_is_one_line_naming_what_is_wrong) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"samples":5,"tensors":[{"name":"x","shape":[2],"dtype":"float64","kind":"param"}]})",
       "tensor 'x' is float64: the shards hold float32"},
      {R"({"samples":5,"tensors":[{"name":"x","shape":[2],"dtype":"float32","kind":"param"},
                                  {"name":"x","shape":[3],"dtype":"float32","kind":"param"}]})",
       "tensor 'x' is listed twice"},
      {R"({"samples":0,"tensors":[{"name":"x","shape":[2],"dtype":"float32","kind":"param"}]})",
       "the script has no training samples (samples 0)"},
      {R"({"samples":5,"tensors":[]})", "the model has no tensors"},
      {R"({"samples":5,"tensors":[{"name":"x","shape":[-2],"dtype":"float32","kind":"param"}]})",
       "tensor 'x': a dimension is not a whole number >= 0"},
      {R"({"samples":5,"tensors":[{"name":"x","shape":[2],"dtype":"float32","kind":"weight"}]})",
       "hello: tensors[0]: kind 'weight' (expected param or buffer)"},
      {R"({"tensors":[]})", "hello has no 'samples'"},
      {R"([1,2])", "hello is not a JSON object"},
      {R"({"samples":5,"tensors":[{"name":"x","shape":[65536,65536,2],"dtype":"float32",
           "kind":"param"}]})",
       "the model has more than 4294967296 floats"},
  };
  for (const auto& [text, message] : cases) {
    auto l = parse_hello(text);
    ASSERT_FALSE(l) << text;
    EXPECT_EQ(l.error().message, message) << text;
  }
}

TEST(external_layout, a_later_layout_that_differs_is_named_by_its_first_differing_tensor) {
  const auto first = *parse_hello(two_tensors);
  EXPECT_EQ(layout_difference(first, first), std::nullopt);
  auto other = first;
  other.tensors[0].shape = {10, 64};
  EXPECT_EQ(layout_difference(first, other),
            "tensor 'fc.weight' has shape [10, 64] where the first process registered [10, 128]");
  other = first;
  other.tensors[1].name = "bn.running_var";
  EXPECT_EQ(layout_difference(first, other),
            "tensor 1 is 'bn.running_var' where the first process registered 'bn.running_mean'");
  other = first;
  other.tensors[1].kind = tensor_kind::param;
  EXPECT_EQ(layout_difference(first, other),
            "tensor 'bn.running_mean' is a param where the first process registered a buffer");
  other = first;
  other.tensors.pop_back();
  EXPECT_EQ(layout_difference(first, other),
            "tensor 'bn.running_mean' of the first process's layout is missing");
  other = first;
  other.samples = 99;
  EXPECT_EQ(layout_difference(first, other),
            "99 training samples where the first process registered 100");
  other = first;
  other.framework = "numpy";  // not compared
  EXPECT_EQ(layout_difference(first, other), std::nullopt);
}

TEST(external_layout, a_layout_as_hello_json_reads_back_the_same) {
  const auto first = *parse_hello(two_tensors);
  auto back = parse_hello(hello_json(first));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->tensors, first.tensors);
  EXPECT_EQ(back->floats, first.floats);
  EXPECT_EQ(back->samples, first.samples);
  EXPECT_EQ(back->test_samples, first.test_samples);
  EXPECT_EQ(back->framework, first.framework);
  EXPECT_EQ(layout_difference(first, *back), std::nullopt);
}

const char* with_tables =
    R"({"op":"hello","protocol":1,"samples":100,"test_samples":10,"framework":"torch 2.15",
        "tensors":[{"name":"fc.weight","shape":[2,8],"dtype":"float32","kind":"param"}],
        "tables":[{"name":"emb.0","rows":1000,"dim":8,"init_scale":0.05},
                  {"name":"emb.1","rows":7,"dim":2}]})";

TEST(external_layout, a_hellos_tables_are_read_compared_and_written_back) {
  auto l = parse_hello(with_tables);
  ASSERT_TRUE(l) << l.error().to_string();
  ASSERT_EQ(l->tables.size(), 2u);
  EXPECT_EQ(l->tables[0], (external_table{"emb.0", 1000, 8, 0.05f}));
  EXPECT_EQ(l->tables[1], (external_table{"emb.1", 7, 2, 0.01f}));  // the default scale
  EXPECT_EQ(l->floats, 16u);  // the tables are not in the flat vector
  auto back = parse_hello(hello_json(*l));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->tables, l->tables);
  EXPECT_EQ(layout_difference(*l, *back), std::nullopt);
  auto other = *l;
  other.tables[1].dim = 4;
  EXPECT_EQ(layout_difference(*l, other),
            "table 'emb.1' has 7 rows of dim 4 (init_scale 0.01) where the first process "
            "registered 7 rows of dim 2 (init_scale 0.01)");
  other.tables.pop_back();
  EXPECT_EQ(layout_difference(*l, other), "table 'emb.1' of the first process's layout is missing");
  const std::string head =
      R"({"samples":5,"tensors":[{"name":"x","shape":[2],"dtype":"float32","kind":"param"}],)";
  const std::pair<std::string, std::string> bad[] = {
      {R"("tables":[{"name":"e","rows":0,"dim":2}]})", "table 'e' has 0 rows (give 1 to 2^40)"},
      {R"("tables":[{"name":"e","rows":5,"dim":70000}]})",
       "table 'e' has dim 70000 (give 1 to 65536)"},
      {R"("tables":[{"name":"e","rows":5,"dim":2},{"name":"e","rows":5,"dim":2}]})",
       "table 'e' is listed twice"},
      {R"("tables":[{"name":"e","rows":5,"dim":2,"init_scale":-1}]})",
       "table 'e': init_scale must be a number >= 0"},
      {R"("tables":[{"rows":5,"dim":2}]})", "hello: tables[0] has no 'name'"},
  };
  for (const auto& [tail, message] : bad) {
    auto r = parse_hello(head + tail);
    ASSERT_FALSE(r) << tail;
    EXPECT_EQ(r.error().message, message);
  }
}

}  // namespace
}  // namespace coach::worker
