// One training process per device (or per CPU group) on this node, as torchrun does: each child
// gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and a share
// of the cores as OMP_NUM_THREADS unless set). SIGINT/SIGTERM are forwarded; when a child fails
// the others are stopped (SIGTERM, then SIGKILL after grace_seconds).
#pragma once

#include <string>
#include <vector>

namespace orchard::train {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int grace_seconds = 10;
  // The command: `classify train ...` or `orchard ...` runs this binary; a path runs that program.
  std::vector<std::string> command;
};

// Starts the workers and waits for them all; returns 0, the first failed child's status, or
// 128 + the signal that stopped them. Throws Error for bad options.
int launch_workers(const LaunchOptions& options);

}  // namespace orchard::train
