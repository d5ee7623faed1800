"""Runs a .tflite file with Arm NN's TfLite parser and its reference CPU backend (Debian's
python3-pyarmnn, libarmnn-cpuref-backend22): an implementation of TFLite that shares no code with
Orchard or TensorFlow. The export tests call it.

    armnn_tflite.py MODEL INPUT OUT_DIR

INPUT: the raw little-endian bytes of the (only) input tensor, in its own type, or of N such
tensors one after the other (N runs). OUT_DIR receives each output as raw float32 bytes, named by
its index (0.bin, 1.bin, ...), the N runs' values stacked, and outputs.json: the outputs' names
and shapes ([N] + the tensor's) in the graph's order.
"""
import json
import os
import sys

import numpy as np
import pyarmnn as ann


def main():
    model, input_path, out_dir = sys.argv[1:4]
    parser = ann.ITfLiteParser()
    network = parser.CreateNetworkFromBinaryFile(model)
    input_names = parser.GetSubgraphInputTensorNames(0)
    if len(input_names) != 1:
        raise SystemExit(f"{model}: {len(input_names)} inputs, one expected")
    input_info = parser.GetNetworkInputBindingInfo(0, input_names[0])
    runtime = ann.IRuntime(ann.CreationOptions())
    optimized, messages = ann.Optimize(network, [ann.BackendId("CpuRef")], runtime.GetDeviceSpec(),
                                       ann.OptimizerOptions())
    network_id, _ = runtime.LoadNetwork(optimized)
    dtype = {ann.DataType_Float32: np.float32, ann.DataType_QAsymmU8: np.uint8}[input_info[1].GetDataType()]
    data = np.fromfile(input_path, dtype=dtype)
    size = input_info[1].GetNumElements()
    if data.size == 0 or data.size % size:
        raise SystemExit(f"{input_path}: {data.size} values, not a multiple of the input's {size}")
    output_names = parser.GetSubgraphOutputTensorNames(0)
    output_infos = [parser.GetNetworkOutputBindingInfo(0, n) for n in output_names]
    runs = []
    for k in range(data.size // size):
        inputs = ann.make_input_tensors([input_info], [data[k * size:(k + 1) * size]])
        outputs = ann.make_output_tensors(output_infos)
        runtime.EnqueueWorkload(network_id, inputs, outputs)
        runs.append(ann.workload_tensors_to_ndarray(outputs))
    listing = []
    for i, (name, info) in enumerate(zip(output_names, output_infos)):
        tensor_info = info[1]
        value = np.stack([np.asarray(run[i]) for run in runs])
        if tensor_info.IsQuantized():  # uint8 outputs: dequantized with their own scale and offset
            value = (value.astype(np.float32) - tensor_info.GetQuantizationOffset()) * tensor_info.GetQuantizationScale()
        value.astype(np.float32).tofile(os.path.join(out_dir, f"{i}.bin"))
        listing.append({"name": name, "shape": list(value.shape)})
    with open(os.path.join(out_dir, "outputs.json"), "w") as f:
        json.dump(listing, f)


if __name__ == "__main__":
    main()
