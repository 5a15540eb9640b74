#pragma once
// worker::model_config: the model section of a job spec.

#include <string>
#include <vector>

namespace coach::worker {

/// Activation between hidden layers.
enum class activation { relu };

/// A multi-layer perceptron: inputs -> hidden[0] -> ... -> hidden[n-1] -> classes.
/// Inputs and classes come from the data set.
struct model_config {
  std::string type = "mlp";  ///< only "mlp" in this version
  std::vector<int> hidden{
      128};  ///< hidden layer widths, each >= 1; may be empty (softmax regression)
  activation act = activation::relu;
};

}  // namespace coach::worker
