// The traintwin subcommands. Each registers itself on the app; its callback parses nothing
// further, calls the libraries and prints.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <string>

namespace traintwin::cli {

/// `traintwin summary SCENARIO`: model, layout, FLOPs, Program and memory at a glance.
void register_summary_command(CLI::App& app);
/// `traintwin program SCENARIO --rank R`: one rank's ops, readably.
void register_program_command(CLI::App& app);
/// `traintwin memory SCENARIO`: per-stage memory breakdown and whether it fits the GPU.
void register_memory_command(CLI::App& app);
/// `traintwin simulate SCENARIO [--json] [--out DIR]`: one iteration replayed in SimGrid.
void register_simulate_command(CLI::App& app);
/// `traintwin cluster PLACEMENT [--json]`: several jobs on one shared fabric, alone vs together.
void register_cluster_command(CLI::App& app);
/// `traintwin validate calibration.yaml`: predicted vs measured for published runs, and MAPE.
void register_validate_command(CLI::App& app);
/// `traintwin collective --topology FILE --num-gpus N --op OP --group tp|dp|all`: simulated
/// nccl-tests table.
void register_collective_command(CLI::App& app);
/// `traintwin topology FILE --num-gpus N`: what a topology file describes.
void register_topology_command(CLI::App& app);
/// `traintwin sweep SCENARIO --tensor-model-parallel-size 1,2,4 ...`: every combination simulated
/// in parallel processes, ranked by tokens/s; `--out DIR` writes sweep.json and sweep.csv.
void register_sweep_command(CLI::App& app);
/// `traintwin report DIR`: rebuilds DIR/report.html (self-contained, Vega-Lite inlined) from the
/// summary.json, timeline.json and sweep.json in DIR.
void register_report_command(CLI::App& app);
/// `traintwin preprocess --input F --output-prefix P --tokenizer-type GPT2BPETokenizer
/// --vocab-file encoder.json --merge-file vocab.bpe [--append-eod]`: Megatron's
/// tools/preprocess_data.py, writing P_text_document.bin/.idx.
void register_preprocess_command(CLI::App& app);
/// `traintwin train SCENARIO [--save DIR] [--load DIR] [--timeline FILE]`: live training with the
/// CPU executor, one process or `mpirun -np N` (one process per rank).
void register_train_command(CLI::App& app);
/// `traintwin profile SCENARIO [--backend cpu] [--out FILE] [--warmup N] [--repeats N]
/// [--topology-out FILE]`: every kernel of the Program timed into traces/db/<device>.json;
/// `mpirun -np N traintwin profile --collectives`: the communicator's nccl-tests table.
void register_profile_command(CLI::App& app);
/// `traintwin goodput SCENARIO [--days D] [--checkpoint-interval auto|MIN] [--runs N] [--seed S]
/// [--json] [--out DIR] [--engine replay|analytical] [--iteration-time S]`: the whole run under
/// failures, checkpoints and restarts (sim/goodput.hpp).
void register_goodput_command(CLI::App& app);

/// `traintwin keys [--readme FILE]`: the scenario key reference as markdown tables, printed or
/// written into FILE between its markers (scenarios/README.md).
void register_keys_command(CLI::App& app);

/// `traintwin export --format chakra SCENARIO --out DIR`: Chakra execution traces per rank.
void register_export_command(CLI::App& app);

/// The folder with the Vega builds the HTML report inlines: `flag` when given, else
/// $TRAINTWIN_VEGA_DIR or data/vega of the source tree. Throws Error saying how to fetch them.
std::filesystem::path resolve_vega_dir(const std::string& flag);

}  // namespace traintwin::cli
