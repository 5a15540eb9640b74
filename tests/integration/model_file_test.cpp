// A trained model kept and used again: `coach train --save` writes safetensors, `coach eval`
// gives the accuracy the run reported, `coach predict` the same predictions, and bad files are
// one-line errors.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/helpers/example_text.hpp"
#include "tests/helpers/run_coach.hpp"
#include "worker/dataset.hpp"
#include "worker/model_file.hpp"

namespace coach {
namespace {

using testing::run_coach;
using testing::temp_file;

/// A small CNN on 2,000 Fashion-MNIST images, 1 epoch: batch norm and dropout included, so
/// evaluation mode (running statistics, no mask) is what eval and predict must reproduce.
constexpr const char* cnn_spec = R"(name: saved-cnn
dataset: {format: idx, path: /usr/share/datasets/fashion-mnist, train_limit: 2000, test_limit: 1000}
model:
  layers:
    - {type: conv2d, channels: 4, kernel: 5, stride: 2}
    - {type: batch_norm}
    - relu
    - {type: max_pool2d, kernel: 2}
    - flatten
    - {type: dropout, p: 0.2}
    - dense
optimizer: {type: adam, learning_rate: 0.003}
batch_size: 32
epochs: 1
seed: 5
workers: 2
shards: 2
)";

std::string after(const std::string& text, const std::string& key) {
  const auto at = text.rfind(key);
  if (at == std::string::npos) return "";
  std::istringstream in(text.substr(at + key.size()));
  std::string word;
  in >> word;
  return word;
}

TEST(model_file, save_then_eval_gives_the_reported_accuracy_and_predict_the_same_labels) {
  const auto spec = temp_file("saved-cnn.yaml", cnn_spec);
  const auto model = spec.parent_path() / "saved-cnn.safetensors";
  auto train = run_coach("train " + spec.string() + " --save " + model.string());
  ASSERT_EQ(train.code, 0) << train.output;
  const std::string reported = after(train.output, "test accuracy ");
  ASSERT_FALSE(reported.empty()) << train.output;

  auto eval = run_coach("eval " + model.string() + " --data " + spec.string());
  ASSERT_EQ(eval.code, 0) << eval.output;
  EXPECT_EQ(after(eval.output, "test accuracy "), reported) << eval.output;

  auto json = run_coach("eval " + model.string() + " --data " + spec.string() + " --json", true);
  ASSERT_EQ(json.code, 0) << json.output;
  const auto j = nlohmann::json::parse(json.output);
  EXPECT_EQ(j["samples"], 1000);
  std::int64_t total = 0, diagonal = 0;
  for (std::size_t i = 0; i < j["confusion"].size(); ++i)
    for (std::size_t k = 0; k < j["confusion"][i].size(); ++k) {
      total += j["confusion"][i][k].get<std::int64_t>();
      if (i == k) diagonal += j["confusion"][i][k].get<std::int64_t>();
    }
  EXPECT_EQ(total, 1000);
  EXPECT_EQ(diagonal, j["correct"].get<std::int64_t>());

  // predict over the whole test file (10,000 images): its first 1,000 are eval's test set.
  auto predicted = run_coach(
      "predict " + model.string() + " /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
      true);
  ASSERT_EQ(predicted.code, 0);
  auto truth = worker::load_idx("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
                                "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(truth) << truth.error().message;
  std::istringstream lines(predicted.output);
  std::int64_t correct_first = 0, count = 0;
  for (int label; lines >> label; ++count)
    if (count < 1000 && label == truth->y[std::size_t(count)]) ++correct_first;
  EXPECT_EQ(count, 10000);
  EXPECT_EQ(correct_first, j["correct"].get<std::int64_t>());

  // The file names its tensors as PyTorch's nn.Sequential does, dense weights out x in.
  auto file = worker::read_safetensors(model.string());
  ASSERT_TRUE(file) << file.error().message;
  ASSERT_NE(file->find("0.weight"), nullptr);
  EXPECT_EQ(file->find("0.weight")->shape, (std::vector<std::int64_t>{4, 1, 5, 5}));
  ASSERT_NE(file->find("1.running_var"), nullptr);
  ASSERT_NE(file->find("6.weight"), nullptr);
  EXPECT_EQ(file->find("6.weight")->shape, (std::vector<std::int64_t>{10, 4 * 6 * 6}));
  EXPECT_EQ(file->metadata.at("format"), "pt");
}

TEST(model_file, a_file_that_is_not_a_model_is_a_one_line_error) {
  const auto junk = temp_file("junk.safetensors", "not a model at all");
  const auto spec = temp_file("any.yaml", cnn_spec);
  auto r = run_coach("eval " + junk.string() + " --data " + spec.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("not a safetensors file"), std::string::npos) << r.output;
  auto missing = run_coach("predict /nonexistent.safetensors " + spec.string());
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("/nonexistent.safetensors: no such file"), std::string::npos)
      << missing.output;
}

TEST(model_file, a_specs_output_and_checkpoint_are_written_by_coach_train) {
  if (!std::filesystem::exists("data/digits.csv.gz")) GTEST_SKIP() << "run scripts/setup.sh";
  std::string text = example_files::example_text("digits-mlp.yaml");
  text.replace(text.find("epochs: 20"), 10, "epochs: 3");
  const auto out = coach::testing::temp_file("x", "").parent_path() / "out";
  text += "output: " + (out / "digits.safetensors").string() +
          "\ncheckpoint: {path: " + (out / "ck.safetensors").string() + "}\n";
  const auto spec = coach::testing::temp_file("outputs.yaml", text);
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);
  auto train = run_coach("train " + spec.string());
  ASSERT_EQ(train.code, 0) << train.output;
  EXPECT_NE(train.output.find("checkpoint after epoch 3"), std::string::npos) << train.output;
  const std::string reported = after(train.output, "test accuracy ");
  ASSERT_FALSE(reported.empty()) << train.output;
  for (const char* file : {"digits.safetensors", "ck.safetensors"}) {
    SCOPED_TRACE(file);
    auto eval = run_coach("eval " + (out / file).string() + " --data " + spec.string());
    ASSERT_EQ(eval.code, 0) << eval.output;
    EXPECT_EQ(after(eval.output, "test accuracy "), reported) << eval.output;
  }
  // --save names another file: the spec's output is not written then.
  std::filesystem::remove(out / "digits.safetensors");
  train = run_coach("train " + spec.string() + " --save " + (out / "other.safetensors").string());
  ASSERT_EQ(train.code, 0) << train.output;
  EXPECT_TRUE(std::filesystem::exists(out / "other.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out / "digits.safetensors"));
}

}  // namespace
}  // namespace coach
