#include "orchard/cli/absl_args.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"

namespace orchard::cli {
namespace {

// Flags of TF Model Garden, the OD API's model_main and im2txt that steer TensorFlow itself
// (TPUs, eager mode, graph compilation, absl logging). `true`: the flag takes a value, which
// may follow as the next argument.
const std::vector<std::pair<std::string, bool>>& tf_only() {
  static const std::vector<std::pair<std::string, bool>> flags = {
      {"tpu", true},           {"tpu_zone", true},         {"tpu_name", true},
      {"gcp_project", true},   {"master", true},           {"use_tpu", false},
      {"enable_eager", false}, {"use_tf_function", false}, {"use_tf_while_loop", false},
      {"enable_xla", false},   {"all_reduce_alg", true},   {"num_packs", true},
      {"mode", true},          {"alsologtostderr", false}, {"logtostderr", false},
      {"v", true},             {"verbosity", true},        {"batchnorm_spatial_persistent", false},
      {"log_dir", true},       {"stderrthreshold", true}};
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
    for (const auto& [name, takes_value] : tf_only()) n.push_back(name);
    return n;
  }();
  return names;
}

std::vector<std::string> absl_arguments(int argc, char** argv) {
  std::vector<std::string> expanded;
  std::set<std::string> open_files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--flagfile" && i + 1 < argc) {
      expand_flagfile(argv[++i], &expanded, &open_files);
    } else {
      expand(arg, &expanded, &open_files);
    }
  }
  std::vector<std::string> out = {argc > 0 ? argv[0] : "orchard"};
  std::set<std::string> reported;
  for (size_t i = 0; i < expanded.size(); ++i) {
    const std::string& arg = expanded[i];
    if (arg == "--") {  // everything after it is positional
      out.insert(out.end(), expanded.begin() + static_cast<long>(i), expanded.end());
      break;
    }
    // "--name[=value]", or absl's "-name=value" (a bare "-v" stays Orchard's --verbose).
    std::string body;
    if (arg.rfind("--", 0) == 0)
      body = arg.substr(2);
    else if (arg.size() > 1 && arg[0] == '-' && arg.find('=') != std::string::npos)
      body = arg.substr(1);
    const std::string name = body.substr(0, body.find('='));
    const auto it = std::find_if(tf_only().begin(), tf_only().end(), [&](const auto& f) {
      return !name.empty() && (f.first == name || "no" + f.first == name);
    });
    if (name.empty() || it == tf_only().end()) {
      out.push_back(arg);
      continue;
    }
    // A value as the next argument: always for a flag that takes one, only true/false for a switch.
    const bool inline_value = body.find('=') != std::string::npos;
    if (!inline_value && i + 1 < expanded.size() &&
        (it->second ? expanded[i + 1].rfind("--", 0) != 0 : is_bool_word(expanded[i + 1])))
      ++i;
    if (reported.insert(it->first).second)
      spdlog::info("--{} is a TensorFlow-only flag: accepted, it changes nothing here", it->first);
  }
  return out;
}

}  // namespace orchard::cli
