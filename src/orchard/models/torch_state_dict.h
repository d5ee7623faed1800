// Reads a PyTorch state dict written by Python's torch.save (the zip format, the default since
// torch 1.6): the archive through libtorch's own PyTorchStreamReader, and data.pkl with a
// small unpickler for the subset torch.save writes (protocol 2: OrderedDict, tensors rebuilt
// by torch._utils._rebuild_tensor_v2 from persistent-id storages, nested dicts, tuples and
// scalars). libtorch 1.13's torch::pickle_load cannot read a real state_dict(): it turns
// collections.OrderedDict into None (see shared/LIBTORCH_NOTES.md).
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace orchard::models {

// (name, tensor) in the file's order. The top-level object must be a dict of tensors (a
// state_dict()); a checkpoint dict that holds one under "state_dict" or "model" is unwrapped.
// Errors (not a zip, unsupported pickle content, a missing storage record) name the file.
std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path);

}  // namespace orchard::models
