// traintwin: a digital twin of LLM training clusters. Thin command line over the libraries.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <exception>
#include <new>

#include "cli/commands.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"traintwin: simulate, tune and run Megatron-style LLM training on GPU clusters"};
  app.require_subcommand(1);
#ifdef TRAINTWIN_HAVE_CUDA
  constexpr const char* kBackends = "cpu, cuda";
#else
  constexpr const char* kBackends = "cpu";
#endif
  app.set_version_flag("--version",
                       fmt::format("traintwin {} (backends: {})", TRAINTWIN_VERSION, kBackends));
  traintwin::cli::register_simulate_command(app);
  traintwin::cli::register_cluster_command(app);
  traintwin::cli::register_validate_command(app);
  traintwin::cli::register_collective_command(app);
  traintwin::cli::register_summary_command(app);
  traintwin::cli::register_program_command(app);
  traintwin::cli::register_memory_command(app);
  traintwin::cli::register_topology_command(app);
  traintwin::cli::register_sweep_command(app);
  traintwin::cli::register_report_command(app);
  traintwin::cli::register_preprocess_command(app);
  traintwin::cli::register_train_command(app);
  traintwin::cli::register_profile_command(app);
  traintwin::cli::register_goodput_command(app);
  traintwin::cli::register_keys_command(app);
  traintwin::cli::register_export_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const traintwin::Error& e) {
    fmt::print(stderr, "traintwin: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // The libraries bound their inputs; this is what is left (a machine short of memory).
    fmt::print(stderr, "traintwin: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    // A library error that was not turned into a traintwin::Error (a bug to report): a message
    // and exit status 2, never an abort.
    fmt::print(stderr, "traintwin: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
