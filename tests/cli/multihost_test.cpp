// Live training across "hosts": two network namespaces made by the test, joined by a veth pair,
// with Open MPI over TCP between them (mpirun runs in namespace A; an agent script, Open MPI's
// plm_rsh_agent, starts the remote daemon inside namespace B with its own host name). The tiny
// GPT trains with DP 2 across the two hosts and must give the losses of one process; then one
// host's rank is killed mid-run (the job must end promptly with a message) and a resume from the
// last checkpoint must continue exactly (bitwise the losses of the uninterrupted run).
// Skips, saying why, where namespaces cannot be created (not root, no `ip`, no CAP_NET_ADMIN).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/run_cli.hpp"
#include "tests/cli/train_log.hpp"
#include "tests/mpi_child_run.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int sh(const std::string& cmd) { return testing::run_cli_command(cmd).status; }

/// Two network namespaces joined by a veth pair, removed on destruction.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(getpid() % 100000);
    ns_a_ = "tt" + id + "a";
    ns_b_ = "tt" + id + "b";
    const int net = 16 + getpid() % 200;  // 10.77.<net>.0/24, unlikely to clash
    subnet_ = "10.77." + std::to_string(net) + ".0/24";
    ip_a_ = "10.77." + std::to_string(net) + ".1";
    ip_b_ = "10.77." + std::to_string(net) + ".2";
    if (getuid() != 0) {
      why_not_ = "not root: creating network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN";
      return;
    }
    if (sh("command -v ip > /dev/null && command -v mpirun > /dev/null && command -v unshare > /dev/null") != 0) {
      why_not_ = "needs ip (iproute2), unshare (util-linux) and Open MPI's mpirun";
      return;
    }
    const std::string va = "tt" + id + "va", vb = "tt" + id + "vb";
    const testing::CliResult r = testing::run_cli_command(
        "set -e; ip netns add " + ns_a_ + "; ip netns add " + ns_b_ + "; ip link add " + va +
        " type veth peer name " + vb + "; ip link set " + va + " netns " + ns_a_ +
        "; ip link set " + vb + " netns " + ns_b_ + "; ip -n " + ns_a_ + " addr add " + ip_a_ +
        "/24 dev " + va + "; ip -n " + ns_b_ + " addr add " + ip_b_ + "/24 dev " + vb +
        "; for n in " + ns_a_ + " " + ns_b_ + "; do ip -n $n link set lo up; done; ip -n " + ns_a_ +
        " link set " + va + " up; ip -n " + ns_b_ + " link set " + vb + " up");
    if (r.status != 0) why_not_ = "cannot create two network namespaces and a veth pair: " + r.output;
    made_ = true;
  }
  ~TwoHosts() {
    if (!made_) return;
    // Anything left in namespace B (a stopped daemon) goes first; deleting a namespace removes
    // its end of the veth pair, and with it the other end.
    sh("ip netns pids " + ns_b_ + " 2>/dev/null | xargs -r kill -9; ip netns pids " + ns_a_ +
       " 2>/dev/null | xargs -r kill -9; ip netns del " + ns_a_ + " 2>/dev/null; ip netns del " +
       ns_b_ + " 2>/dev/null");
  }
  const std::string& why_not() const { return why_not_; }

  /// Writes the agent script (Open MPI calls it as `agent HOST COMMAND...`): HOST's namespace,
  /// a UTS namespace of its own named HOST, then the command through sh.
  std::string write_agent(const fs::path& dir) const {
    const fs::path agent = dir / "netns-agent.sh";
    std::ofstream f(agent);
    f << "#!/bin/sh\n"
         "# plm_rsh_agent of the multi-host test: runs the command on \"host\" $1 = its namespace\n"
         "host=$1; shift\n"
         "case $host in\n"
         "  " << ip_a_ << ") ns=" << ns_a_ << " ;;\n"
         "  " << ip_b_ << ") ns=" << ns_b_ << " ;;\n"
         "  *) echo \"netns-agent: unknown host $host\" >&2; exit 1 ;;\n"
         "esac\n"
         "exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns; $*\"\n";
    f.close();
    fs::permissions(agent, fs::perms::owner_all);
    return agent.string();
  }

  /// `mpirun` in namespace A, one rank per host, TCP only over the veth pair (after
  /// testing::kMpirunEnvironment and a timeout).
  std::string mpirun(const std::string& agent) const {
    return "ip netns exec " + ns_a_ +
           " mpirun --allow-run-as-root -np 2 --host " + ip_a_ + ":1," + ip_b_ +
           ":1 --mca plm_rsh_agent " + agent +
           " --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self --mca btl_tcp_if_include " + subnet_ +
           " --mca oob_tcp_if_include " + subnet_ + " ";
  }

  const std::string& ns_b() const { return ns_b_; }

 private:
  std::string ns_a_, ns_b_, subnet_, ip_a_, ip_b_, why_not_;
  bool made_ = false;
};

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("traintwin-multihost-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(MultiHost, DataParallelOverTcpAcrossTwoNamespacesKillAndResume) {
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string prefix = testing::write_synthetic_dataset(dir_);
  const std::string scenario = testing::write_tiny_scenario(dir_, prefix);
  const std::string agent = hosts.write_agent(dir_);
  const std::string bin = TRAINTWIN_BINARY;
  const std::string dp2 = " train " + scenario + " --set cluster.num_gpus=2 ";

  // DP 2 across the hosts: the losses of one process.
  const testing::CliResult one = testing::run_cli("train " + scenario);
  ASSERT_EQ(one.status, 0) << one.output;
  const testing::CliResult two = testing::run_cli_command(testing::kMpirunEnvironment + "timeout 300 " + hosts.mpirun(agent) + bin + dp2);
  ASSERT_EQ(two.status, 0) << two.output;
  const testing::Losses a = testing::parse_losses(one.output), b = testing::parse_losses(two.output);
  ASSERT_EQ(a.train.size(), 20u);
  ASSERT_EQ(b.train.size(), 20u) << two.output;
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_NEAR(b.train[i], a.train[i], 1e-5 * a.train[i]) << "iteration " << i + 1;
  }

  // A longer run (so that the kill lands mid-run): the uninterrupted reference, then the same
  // run killed on host B after the checkpoint of iteration 5: the job ends promptly, saying so.
  const std::string longer = dp2 + "--train-iters 200 --lr-decay-iters 200 --eval-interval 100 ";
  const testing::CliResult reference = testing::run_cli_command(
      testing::kMpirunEnvironment + "timeout 300 " + hosts.mpirun(agent) + bin + longer);
  ASSERT_EQ(reference.status, 0) << reference.output;
  const testing::Losses ref = testing::parse_losses(reference.output);
  ASSERT_EQ(ref.train.size(), 200u);
  const fs::path ckpt = dir_ / "ckpt";
  const fs::path log = dir_ / "killed.log";
  const std::string save = " --save " + ckpt.string() + " --set training.save_interval=5";
  // Each rank writes its pid, then becomes traintwin (exec: the same process).
  const std::string wrapped = "sh -c 'echo $$ > " + dir_.string() +
                              "/rank$OMPI_COMM_WORLD_RANK.pid; exec \"$0\" \"$@\"' " + bin;
  ASSERT_EQ(sh("(" + testing::kMpirunEnvironment + "timeout 300 " + hosts.mpirun(agent) + wrapped +
               longer + save + " > " + log.string() + " 2>&1; echo $? > " + log.string() +
               ".rc) < /dev/null > /dev/null 2>&1 &"),  // detached: run_cli_command returns at once
            0);
  const auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto t0 = Clock::now();
  // The checkpoint tracker appears once iteration 5 is saved (the forwarded log may lag).
  while (!fs::exists(ckpt / "latest_checkpointed_iteration.txt")) {
    ASSERT_LT(Clock::now() - t0, std::chrono::seconds(240)) << slurp(log);
    ASSERT_FALSE(fs::exists(log.string() + ".rc")) << "the job ended early:\n" << slurp(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Host B's rank (MPI rank 1), by the pid its launch wrapper wrote; it must be in namespace B.
  const std::string pid = slurp(dir_ / "rank1.pid").substr(0, slurp(dir_ / "rank1.pid").find('\n'));
  ASSERT_FALSE(pid.empty()) << "no pid file of rank 1";
  const testing::CliResult killed = testing::run_cli_command(
      "[ \"$(readlink /proc/" + pid + "/ns/net)\" = \"$(ip netns exec " + hosts.ns_b() +
      " readlink /proc/self/ns/net)\" ] && echo in-namespace-B; kill -9 " + pid + " && echo killed");
  ASSERT_THAT(killed.output, HasSubstr("killed"))
      << "could not kill rank 1 (pid " << pid << "): " << killed.output << "\nlog:\n" << slurp(log);
  EXPECT_THAT(killed.output, HasSubstr("in-namespace-B")) << killed.output;
  const auto t_kill = Clock::now();
  while (!fs::exists(log.string() + ".rc") || slurp(log.string() + ".rc").empty()) {
    ASSERT_LT(Clock::now() - t_kill, std::chrono::seconds(60))
        << "the job did not end within 60 s of the kill:\n" << slurp(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double end_s = std::chrono::duration<double>(Clock::now() - t_kill).count();
  std::printf("the job ended %.1f s after host B's rank was killed\n", end_s);
  const std::string out = slurp(log);
  EXPECT_NE(std::stoi(slurp(log.string() + ".rc")), 0) << out;
  EXPECT_THAT(out, HasSubstr("signal 9")) << out;  // mpirun names the rank, its host and signal
  const testing::Losses before = testing::parse_losses(out);
  ASSERT_GE(before.train.size(), 5u);
  ASSERT_LT(before.train.size(), 200u) << "the run finished before the kill";

  // Resume from the last checkpoint: every later loss is the uninterrupted run's, bit for bit.
  const testing::CliResult resumed = testing::run_cli_command(
      testing::kMpirunEnvironment + "timeout 300 " + hosts.mpirun(agent) + bin + longer +
      " --load " + ckpt.string());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from"));
  const testing::Losses rest = testing::parse_losses(resumed.output);
  ASSERT_GE(rest.train.size(), 1u);
  ASSERT_LE(rest.train.size(), 195u);
  const size_t first = 200 - rest.train.size();
  EXPECT_EQ(first % 5, 0u) << "resumed at a checkpoint iteration";
  for (size_t i = 0; i < rest.train.size(); ++i) {
    EXPECT_EQ(rest.train[i], ref.train[first + i]) << "iteration " << first + i + 1;
  }
}

}  // namespace
}  // namespace traintwin
