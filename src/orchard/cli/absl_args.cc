#include "orchard/cli/absl_args.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"

namespace orchard::cli {
namespace {

// Flags of TF Model Garden, the OD API's model_main / model_tpu_main and im2txt that steer
// TensorFlow itself (TPUs, eager mode, graph compilation, GPU threads, absl logging).
struct TfOnlyFlag {
  const char* name;
  bool takes_value;  // the value may follow as the next argument
  const char* why;   // what stands in for it here; "" for the generic line
};
const std::vector<TfOnlyFlag>& tf_only() {
  static const std::vector<TfOnlyFlag> flags = {
      {"tpu", true, ""},
      {"tpu_zone", true, ""},
      {"tpu_name", true, ""},
      {"gcp_project", true, ""},
      {"master", true, ""},
      {"use_tpu", false, ""},
      {"enable_eager", false, ""},
      {"use_tf_function", false, ""},
      {"use_tf_while_loop", false, ""},
      {"enable_xla", false, ""},
      {"all_reduce_alg", true, ""},
      {"num_packs", true, ""},
      {"mode", true, ""},  // a flag of its own where a command declares it (detect/classify train)
      {"alsologtostderr", false, ""},
      {"logtostderr", false, ""},
      {"v", true, ""},
      {"verbosity", true, ""},
      {"batchnorm_spatial_persistent", false, ""},
      {"log_dir", true, ""},
      {"stderrthreshold", true, ""},
      // model_tpu_main: TPU cores per replica group; the replicas here are the processes of
      // `orchard launch` (or the hosts of TF_CONFIG).
      {"num_shards", true, "the replicas are the processes of `orchard launch`"},
      // The Model Garden's GPU thread pools (common.py): libtorch sizes its own.
      {"tf_gpu_thread_mode", true, "libtorch's thread pools are set by --num_threads"},
      {"per_gpu_thread_count", true, "libtorch's thread pools are set by --num_threads"},
      // The Model Garden's Keras metrics switch: the accuracy is a by-product of the loss here.
      {"report_accuracy_metrics", false, "the accuracy is always reported"},
  };
  return flags;
}

bool is_bool_word(const std::string& s) {
  return s == "true" || s == "false" || s == "True" || s == "False" || s == "1" || s == "0";
}

void expand(const std::string& arg, std::vector<std::string>* out, std::set<std::string>* open_files);

void expand_flagfile(const std::string& path, std::vector<std::string>* out, std::set<std::string>* open_files) {
  if (path.empty()) throw Error("--flagfile needs a file name");
  if (open_files->count(path)) throw Error("--flagfile " + path + " includes itself");
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception&) {
    throw Error("--flagfile " + path + ": cannot read it");
  }
  open_files->insert(path);
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    if (line[0] == '#' || line.rfind("//", 0) == 0) continue;
    expand(line, out, open_files);
  }
  open_files->erase(path);
}

void expand(const std::string& arg, std::vector<std::string>* out, std::set<std::string>* open_files) {
  if (arg.rfind("--flagfile=", 0) == 0) return expand_flagfile(arg.substr(11), out, open_files);
  out->push_back(arg);
}

}  // namespace

const std::vector<std::string>& tensorflow_only_flags() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& flag : tf_only()) n.push_back(flag.name);
    return n;
  }();
  return names;
}

std::vector<std::string> expand_flagfiles(int argc, char** argv) {
  std::vector<std::string> expanded = {argc > 0 ? argv[0] : "orchard"};
  std::set<std::string> open_files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--flagfile" && i + 1 < argc) {
      expand_flagfile(argv[++i], &expanded, &open_files);
    } else {
      expand(arg, &expanded, &open_files);
    }
  }
  return expanded;
}

std::vector<std::string> drop_tensorflow_only_flags(const std::vector<std::string>& args,
                                                    const std::function<bool(const std::string&)>& declared) {
  std::vector<std::string> out;
  std::set<std::string> reported;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (i == 0) {
      out.push_back(arg);
      continue;
    }
    if (arg == "--") {  // everything after it is positional
      out.insert(out.end(), args.begin() + static_cast<long>(i), args.end());
      break;
    }
    // "--name[=value]", or absl's "-name=value" (a bare "-v" stays Orchard's --verbose).
    std::string body;
    if (arg.rfind("--", 0) == 0) body = arg.substr(2);
    else if (arg.size() > 1 && arg[0] == '-' && arg.find('=') != std::string::npos) body = arg.substr(1);
    const std::string name = body.substr(0, body.find('='));
    const auto it = std::find_if(tf_only().begin(), tf_only().end(), [&](const TfOnlyFlag& f) {
      return !name.empty() && (f.name == name || "no" + std::string(f.name) == name);
    });
    if (name.empty() || it == tf_only().end() || (declared && declared(it->name))) {
      out.push_back(arg);
      continue;
    }
    // A value as the next argument: always for a flag that takes one, only true/false for a switch.
    const bool inline_value = body.find('=') != std::string::npos;
    if (!inline_value && i + 1 < args.size() &&
        (it->takes_value ? args[i + 1].rfind("--", 0) != 0 : is_bool_word(args[i + 1])))
      ++i;
    if (reported.insert(it->name).second) {
      if (*it->why)
        spdlog::info("--{} is a TensorFlow-only flag: accepted, it changes nothing here ({})", it->name, it->why);
      else spdlog::info("--{} is a TensorFlow-only flag: accepted, it changes nothing here", it->name);
    }
  }
  return out;
}

std::vector<std::string> absl_arguments(int argc, char** argv) {
  return drop_tensorflow_only_flags(expand_flagfiles(argc, argv), {});
}

}  // namespace orchard::cli
