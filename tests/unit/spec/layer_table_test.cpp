// README.md's table of layers lists exactly the layer types the parser accepts and the fields of
// each (scheduler::layer_types(), what open_layer reads), so the docs cannot drift from the
// code; and dropout's probability has one name, the other refused naming it.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "spec/job_spec.hpp"

namespace coach::scheduler {
namespace {

/// The rows of README.md's layer table: layer -> the backquoted fields of its second column.
std::map<std::string, std::set<std::string>> readme_layers() {
  std::ifstream in(std::string(COACH_SOURCE_DIR) + "/README.md");
  std::map<std::string, std::set<std::string>> rows;
  bool in_table = false;
  const std::regex row(R"(^\| `([a-z0-9_]+)` \| ([^|]*) \|)");
  const std::regex field("`([a-z_]+)`");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("| layer | fields besides `type` |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!line.starts_with("|")) break;
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    auto& fields = rows[m[1]];
    const std::string cell = m[2];
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), field);
         it != std::sregex_iterator(); ++it)
      fields.insert((*it)[1]);
  }
  return rows;
}

TEST(layer_table, readme_lists_every_layer_type_with_the_fields_the_parser_accepts) {
  const auto readme = readme_layers();
  ASSERT_FALSE(readme.empty()) << "README.md has no table headed '| layer | fields besides "
                                  "`type` |'";
  std::map<std::string, std::set<std::string>> parser;
  for (const auto& t : layer_types())
    parser[std::string(t.type)] = std::set<std::string>(t.fields.begin(), t.fields.end());
  EXPECT_EQ(readme, parser);
  // And each field listed is one a spec may give: a layer of it parses.
  for (const auto& [type, fields] : parser)
    for (const auto& f : fields) {
      SCOPED_TRACE(type + "." + f);
      std::string value = f == "p" || f == "momentum" || f == "epsilon" ? "0.25" : "1";
      if (f == "padding") value = "0";
      const std::string layer = "{type: " + type + ", " + f + ": " + value +
                                (type == "conv2d" && f != "channels" ? ", channels: 2" : "") +
                                (type == "conv2d" && f != "kernel" ? ", kernel: 3" : "") + "}";
      auto r = parse_model_yaml("layers: [" + layer + ", dense]\n", "m.yaml");
      EXPECT_TRUE(r) << r.error().message;
    }
}

TEST(layer_table, dropout_takes_p_and_refuses_rate_naming_p) {
  auto ok = parse_model_yaml("layers: [{type: dense, units: 4}, {type: dropout, p: 0.3}, dense]\n",
                             "m.yaml");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_FLOAT_EQ(ok->layers[1].p, 0.3f);
  auto rate = parse_model_yaml(
      "layers:\n  - {type: dense, units: 4}\n  - {type: dropout, rate: 0.3}\n  - dense\n",
      "m.yaml");
  ASSERT_FALSE(rate);
  EXPECT_EQ(rate.error().code, errc::invalid_argument);
  EXPECT_EQ(rate.error().message,
            "m.yaml:3: field 'model.layers[1].rate' is not a dropout field: its probability is "
            "p, as PyTorch's nn.Dropout(p) ({type: dropout, p: 0.2})");
}

}  // namespace
}  // namespace coach::scheduler
