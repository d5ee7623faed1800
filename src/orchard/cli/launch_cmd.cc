// orchard launch: one process per device (or per CPU group) on this node, as torchrun does
// (train/launch.h); exits with the failed child's status.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <memory>

#include "orchard/cli/commands.h"
#include "orchard/train/launch.h"

namespace orchard::cli {

void add_launch_command(CLI::App& app) {
  auto f = std::make_shared<train::LaunchOptions>();
  auto* c = app.add_subcommand("launch", "Start one training process per device or CPU group (like torchrun)");
  c->add_option("--nproc_per_node", f->nproc_per_node, "Processes on this node")->capture_default_str();
  c->add_option("--nnodes", f->nnodes, "Nodes")->capture_default_str();
  c->add_option("--node_rank", f->node_rank, "This node's index")->capture_default_str();
  c->add_option("--master_addr", f->master_addr, "Rendezvous host (rank 0's node)")->capture_default_str();
  c->add_option("--master_port", f->master_port, "Rendezvous port")->capture_default_str();
  c->add_option("--grace_seconds", f->grace_seconds, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  c->add_option("command", f->command, "The command after --, e.g. -- classify train --data_dir ...")->required();
  c->callback([f] {
    const int rc = train::launch_workers(*f);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace orchard::cli
