# Finds libtorch either as a pip/conda style install that ships TorchConfig.cmake
# (CUDA libtorch 2.x: -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)'))
# or as Debian's libtorch-dev 1.13, which ships headers and libraries but no config file.
# Defines the imported target orchard::torch.

# -DORCHARD_TORCH_MANUAL=ON skips TorchConfig.cmake (to use or test the manual search).
if(NOT ORCHARD_TORCH_MANUAL)
  find_package(Torch CONFIG QUIET)
endif()
if(Torch_FOUND)
  add_library(orchard_torch INTERFACE)
  target_link_libraries(orchard_torch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(orchard_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  add_library(orchard::torch ALIAS orchard_torch)
  set(ORCHARD_TORCH_KIND "TorchConfig (${Torch_DIR})")
  # A CUDA libtorch (pip's torch+cuXXX) ships libc10_cuda and c10d's NCCL process group:
  # multi-process GPU training uses it (src/orchard/train/distributed.cc). Its header needs
  # nccl.h, which pip keeps in the nvidia-nccl package beside torch (or a CUDA toolkit has).
  find_library(ORCHARD_C10_CUDA_LIB c10_cuda PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
  if(ORCHARD_C10_CUDA_LIB)
    file(GLOB _orchard_nccl_hints "${TORCH_INSTALL_PREFIX}/../nvidia/nccl*/include")
    find_path(ORCHARD_NCCL_INCLUDE_DIR nccl.h HINTS ${_orchard_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
              /usr/local/cuda/include)
    if(ORCHARD_NCCL_INCLUDE_DIR)
      target_include_directories(orchard_torch SYSTEM INTERFACE ${ORCHARD_NCCL_INCLUDE_DIR})
      target_compile_definitions(orchard_torch INTERFACE ORCHARD_NCCL USE_C10D_NCCL)
      string(APPEND ORCHARD_TORCH_KIND ", CUDA with NCCL")
    else()
      message(WARNING "CUDA libtorch without nccl.h: multi-process GPU training is disabled")
      string(APPEND ORCHARD_TORCH_KIND ", CUDA without NCCL")
    endif()
  endif()
  return()
endif()

find_path(TORCH_API_INCLUDE_DIR torch/torch.h
  PATHS /usr/include/torch/csrc/api/include NO_DEFAULT_PATH)
find_path(TORCH_INCLUDE_DIR torch/script.h PATHS /usr/include)
find_library(TORCH_LIB torch)
find_library(TORCH_CPU_LIB torch_cpu)
find_library(C10_LIB c10)
if(NOT TORCH_API_INCLUDE_DIR OR NOT TORCH_LIB OR NOT TORCH_CPU_LIB OR NOT C10_LIB)
  message(FATAL_ERROR "libtorch not found: install Debian's libtorch-dev (scripts/test.sh does) "
                      "or pass -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path>")
endif()
find_package(Threads REQUIRED)
add_library(orchard_torch INTERFACE)
target_include_directories(orchard_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIR} ${TORCH_API_INCLUDE_DIR})
target_link_libraries(orchard_torch INTERFACE ${TORCH_LIB} ${TORCH_CPU_LIB} ${C10_LIB} Threads::Threads)
add_library(orchard::torch ALIAS orchard_torch)
set(ORCHARD_TORCH_KIND "Debian libtorch-dev (${TORCH_CPU_LIB})")
