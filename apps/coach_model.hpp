#pragma once
// The commands of `coach` that use a saved model (worker/model_file.hpp): `train --save`,
// `eval` and `predict`. Each prints its errors on stderr as one line and returns the exit code
// (0 done; 1 an I/O failure; 2 bad input: a missing or malformed file, a data set that does not
// fit the model).

#include <string>

#include "report/job_report.hpp"
#include "spec/job_spec.hpp"

namespace coach::apps {

/// Writes the parameters of a finished `coach train` run to `path` as safetensors.
int save_model(const std::string& path, const scheduler::job_spec& spec,
               const scheduler::job_result& result);

/// `coach eval FILE --data SPEC [--json]`: the loss and accuracy of the saved model on the test
/// set of SPEC's data set (with --json: one object with the confusion matrix too).
int run_eval(const std::string& model_path, const std::string& spec_path, bool json);

/// `coach predict FILE INPUT [--header]`: one predicted label per line for each row of a CSV
/// file of features (the transform the model was trained with applied) or each image of an IDX
/// image file (idx3, plain or gzipped). INPUT may be a pipe or FIFO, and "-" reads standard
/// input; CSV and IDX are told apart by the first bytes either way.
int run_predict(const std::string& model_path, const std::string& input, bool header);

}  // namespace coach::apps
