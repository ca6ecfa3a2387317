#pragma once
// Runs a measurement in a forked child, so that each configuration's peak memory is its own and a
// crash or an out-of-memory kill is reported instead of taking the command down.
#include <functional>
#include <string>

namespace linattn::cli {

// Runs body() in a child process and returns the string it returned. An exception in the child is
// rethrown here as the same kind of error where known (UsageError, linattn::Error), else as
// std::runtime_error; a child killed by a signal becomes a std::runtime_error naming the signal.
// The parent must not have run OpenMP code: GNU libgomp's thread pool does not survive fork.
std::string run_isolated(const std::function<std::string()>& body);

}  // namespace linattn::cli
