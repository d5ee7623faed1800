// The command-line habits of TensorFlow users (absl flags), applied to argv before CLI11
// parses it, so that every command honours them alike:
//   --flagfile=FILE   FILE's lines are arguments (one per line; blank lines and lines starting
//                     with '#' or '//' are skipped; flagfiles may name further flagfiles);
//   TensorFlow-only flags (--tpu, --use_tpu, --enable_eager, --use_tf_function, --num_shards,
//                     --alsologtostderr, --logtostderr, --v, ...) are removed with their
//                     values, each reported in one line as changing nothing here, unless the
//                     command being run declares the flag itself (detect/classify train's --mode).
// A repeated flag keeping its last value and --nofoo for a boolean --foo are set up where
// the options are declared (cli/task_cmd.cc).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace orchard::cli {

// argv[0] first, as given, then the arguments with every --flagfile expanded. Throws
// orchard::Error for a flagfile that cannot be read (or that includes itself).
std::vector<std::string> expand_flagfiles(int argc, char** argv);

// `args` (argv[0] first) without the TensorFlow-only flags and their values; `declared(name)`
// says whether the command being run declares --name itself (then it stays).
std::vector<std::string> drop_tensorflow_only_flags(const std::vector<std::string>& args,
                                                    const std::function<bool(const std::string&)>& declared);

// Both, for a command that declares none of the TensorFlow-only flags.
std::vector<std::string> absl_arguments(int argc, char** argv);

// The TensorFlow-only flags removed by absl_arguments, by name without dashes.
const std::vector<std::string>& tensorflow_only_flags();

}  // namespace orchard::cli
