#pragma once
// coach::unwritable: whether a file can be written at a path, said before the work that would
// write it (coach train's outputs, a submitted job's output: on the scheduler's host).

#include <optional>
#include <string>
#include <string_view>

namespace coach {

/// Why no file can be written at `path` (it exists and is not writable, is a directory, or its
/// directory is missing or not writable), naming `what` (the flag or field) and the path; nothing
/// when one can.
std::optional<std::string> unwritable(std::string_view what, const std::string& path);

}  // namespace coach
