// convkit: the command-line front door (bench, run, tune, list, filter, doctor). The library does the work; this
// parses flags, calls it, and prints. Errors: one line "convkit: error: ..." on stderr, exit 2 (user) or 1.
#include <iostream>
#include <new>

#include "commands.hpp"
#include "common.hpp"

int main(int argc, char** argv) {
  using namespace convkit::cli;
  CLI::App app{"convkit: hand-written 2-D convolution kernels, with a benchmark and verification harness."};
  app.set_version_flag("--version", std::string("convkit ") + convkit::version());
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::simple);

  BenchOptions bench_opt;
  RunCmdOptions run_opt;
  TuneOptions tune_opt;
  ListOptions list_opt;
  FilterOptions filter_opt;
  CLI::App* bench = add_bench(app, bench_opt);
  CLI::App* run = add_run(app, run_opt);
  CLI::App* tune = add_tune(app, tune_opt);
  CLI::App* list = add_list(app, list_opt);
  CLI::App* filter = add_filter(app, filter_opt);
  CLI::App* doctor = add_doctor(app);
  PlanCmdOptions plan_opt;
  CLI::App* plan = add_plan(app, plan_opt);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = app.get_subcommands().empty() ? "convkit" : "convkit " + app.get_subcommands()[0]->get_name();
    return report_error(std::string(e.what()) + " (see `" + where + " --help`)", 2);
  }

  try {
    if (bench->parsed()) return run_bench(bench_opt);
    if (run->parsed()) return run_run(run_opt);
    if (tune->parsed()) return run_tune(tune_opt);
    if (list->parsed()) return run_list(list_opt);
    if (filter->parsed()) return run_filter(filter_opt);
    if (doctor->parsed()) return run_doctor();
    if (plan->parsed()) return run_plan(plan_opt);
    return report_error("no subcommand given (see `convkit --help`)", 2);
  } catch (const UsageError& e) {
    return report_error(e.what(), 2);
  } catch (const convkit::Error& e) {
    return report_error(e.what(), exit_code(e.code()));
  } catch (const std::bad_alloc&) {
    return report_error("out of host memory", 1);
  } catch (const std::exception& e) {
    return report_error(std::string("internal error: ") + e.what(), 1);
  }
}
