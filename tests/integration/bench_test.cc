// `weft bench` end to end: a tiny run of W1,W2,W3,W5,W6 against a `weft up`
// cluster (2 storage servers x 1 target, 2 replicas) with a baseline
// directory, whose JSON must have the fields of WORKLOADS.md; and a run whose
// verification must catch one corrupted byte.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "process.h"

namespace weft {
namespace {

using weft::testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Exit code of a shell command.
int run(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

std::string bin() { return weft::testing::weft_binary(); }

// Checks a JSON file with a small Python program; returns "" or what is wrong.
std::string check_json(const std::string& json_path, const std::string& program, const std::string& dir) {
  std::string script = dir + "/check.py";
  std::ofstream(script) << "import json, sys\nr = json.load(open(sys.argv[1]))\nproblems = []\n"
                        << program << "\nprint('\\n'.join(problems))\nsys.exit(1 if problems else 0)\n";
  std::string out = dir + "/check.out";
  int rc = run(fmt::format("/usr/bin/python3 {} {} > {} 2>&1", script, json_path, out));
  return rc == 0 ? "" : "JSON check failed:\n" + slurp(out);
}

class BenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    data_ = dir_->path() + "/cluster";
    int rc = run(fmt::format("{} up --data-dir {} --storage-servers 2 --targets-per-server 1 --replicas 2 > {}/up.log 2>&1",
                             bin(), data_, dir_->path()));
    up_ok_ = rc == 0;
  }
  static void TearDownTestSuite() {
    weft::testing::stop_cluster(data_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(up_ok_) << "weft up failed:\n" << slurp(dir_->path() + "/up.log");
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::string data_;
  static inline bool up_ok_ = false;
};

constexpr const char* kTiny =
    "--writers 2 --checkpoint-size 4MiB --io-size 1MiB --files 200 --dirs 10 --readers 4 --md-clients 2 "
    "--md-files 100 --open-clients 4 --open-files 50 --open-seconds 1";

TEST_F(BenchTest, TinyRunAgainstClusterWithBaselineWritesWorkloadsJson) {
  std::string json = dir_->path() + "/results.json", html = dir_->path() + "/report.html",
              log = dir_->path() + "/bench.log";
  int rc = run(fmt::format("{} bench --target weft:///bench --config {}/client.toml --baseline {}/baseline "
                           "--workloads W1,W2,W3,W5,W6 {} --json {} --report {} > {} 2>&1",
                           bin(), data_, dir_->path(), kTiny, json, html, log));
  std::string out = slurp(log);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ratio"), std::string::npos) << out;
  EXPECT_NE(out.find("OK: no errors"), std::string::npos) << out;

  std::string problems = check_json(json, R"PY(
m = r['machine']
for k in ('cores', 'memory_gib', 'kernel'):
    if k not in m: problems.append('machine.' + k + ' missing')
if not r.get('command', '').startswith('weft bench'): problems.append('command: %r' % r.get('command'))
need = {'W1': ['gib_per_s', 'seconds'], 'W2': ['gib_per_s', 'seconds'],
        'W3': ['files_per_s', 'mib_per_s', 'latency_p50_ms', 'latency_p99_ms'],
        'W5': ['create_ops_per_s', 'stat_ops_per_s', 'remove_ops_per_s', 'shared_create_ops_per_s',
               'shared_stat_ops_per_s', 'shared_remove_ops_per_s'],
        'W6': ['opens_per_s', 'latency_p99_ms']}
seen = [x['workload'] for x in r['results']]
if seen != ['W1', 'W2', 'W3', 'W5', 'W6']: problems.append('workloads %r' % seen)
for x in r['results']:
    w = x['workload']
    if x['access'] != 'native': problems.append(w + ' access ' + x['access'])
    if x['target'] != 'weft:///bench': problems.append(w + ' target ' + x['target'])
    if x['errors'] != 0 or x['verified'] is not True: problems.append(w + ' errors/verified')
    for f in need[w]:
        v = x['figures'].get(f)
        if not isinstance(v, (int, float)) or v <= 0: problems.append('%s figures.%s = %r' % (w, f, v))
        b = x['baseline']['figures'].get(f)
        if not isinstance(b, (int, float)) or b <= 0: problems.append('%s baseline.figures.%s = %r' % (w, f, b))
        if not isinstance(x['ratios'].get(f), (int, float)): problems.append('%s ratios.%s' % (w, f))
    if not x['baseline']['path'].endswith('/baseline'): problems.append(w + ' baseline.path')
)PY",
                                     dir_->path());
  EXPECT_EQ(problems, "") << slurp(json);
  std::string report = slurp(html);
  EXPECT_NE(report.find("<svg"), std::string::npos);
  EXPECT_NE(report.find("W6 many-opens"), std::string::npos);
}

TEST_F(BenchTest, VerificationCatchesOneCorruptedByte) {
  std::string target = dir_->path() + "/plain", json = dir_->path() + "/corrupt.json",
              log = dir_->path() + "/corrupt.log";
  int rc = run(fmt::format("{} bench --target {} --workloads W1 --writers 2 --checkpoint-size 1MiB --keep > {} 2>&1",
                           bin(), target, log));
  ASSERT_EQ(rc, 0) << slurp(log);
  std::string file = target + "/w1/ckpt-1";
  ASSERT_EQ(std::filesystem::file_size(file), 1u << 20);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(123457);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(123457);
    f.write(&c, 1);
  }
  rc = run(fmt::format("{} bench --target {} --workloads W2 --writers 2 --checkpoint-size 1MiB --json {} > {} 2>&1",
                       bin(), target, json, log));
  std::string out = slurp(log);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("w1/ckpt-1: 1 bytes differ"), std::string::npos) << out;
  std::string problems = check_json(json, R"PY(
x = r['results'][0]
if x['workload'] != 'W2': problems.append('workload ' + x['workload'])
if x['access'] != 'directory': problems.append('access ' + x['access'])
if x['verified'] is not False: problems.append('verified should be false')
if not x['errors'] > 0: problems.append('errors should be > 0')
)PY",
                                     dir_->path());
  EXPECT_EQ(problems, "") << slurp(json);
}

}  // namespace
}  // namespace weft
