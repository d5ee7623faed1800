#!/usr/bin/env bash
# A real TensorFlow checkpoint, converted by Orchard, against TensorFlow's frozen graph of the
# same checkpoint run by OpenCV's DNN module (issue 32; bench/tf_graph_check.cc says what it
# checks). The pair is not in the repository (no licence for its weights): TensorFlow's
# speech_commands "conv" model as github.com/RezisEwig/cnn_speech (commit f6d3add233d6) holds it,
# conv.ckpt-18000.{index,data-00000-of-00001}, checkpoint and freeze_conv.pb in one directory.
#
#   bench/tf_graph_check.sh [DIR]      # DIR default: ../shared/tf/speech_commands_conv
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/../shared/tf/speech_commands_conv}"
BUILD="${BUILD:-$ROOT/build}"
[ -f "$DIR/freeze_conv.pb" ] || { echo "tf_graph_check.sh: no $DIR/freeze_conv.pb (see the comment at the top)" >&2; exit 2; }
export ORCHARD_BUILD_DIR="$BUILD"
source "$ROOT/scripts/setup.sh"
orchard_build tf_graph_check >/dev/null
"$BUILD/bench/tf_graph_check" --checkpoint "$DIR" --graph "$DIR/freeze_conv.pb" "${@:2}"
