// Worst-case fp32 error of every operator of the table (table/) against its fp64 oracle over the
// table's awkward test cases, printed as a table (the figures quoted in the issue notes) and held to
// each operator's bound. Run: build/tests/oracle_sweep_slow_test (labelled slow: the sanitizer pass
// skips it).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "operator_table.hpp"
#include "support/table_case.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::relative_error;

// Worst error seen per (operator, tensor).
std::map<std::string, double>& worst() {
  static std::map<std::string, double> table;
  return table;
}

void record(const std::string& what, double error, double bound) {
  double& w = worst()[what];
  w = std::max(w, error);
  EXPECT_LE(error, bound) << what;
}

class OracleSweep : public ::testing::TestWithParam<const table::Operator*> {};

TEST_P(OracleSweep, EveryTestCaseMatchesTheOracle) {
  const table::Operator& op = *GetParam();
  const std::vector<table::TestCase> cases = op.test_cases();
  ASSERT_FALSE(cases.empty()) << op.name << " declares no test case";
  std::mt19937_64 rng(1);
  for (const table::TestCase& c : cases) {
    const auto run = testing::make_run(op, c, rng);
    SCOPED_TRACE(testing::describe(c, *run));
    std::string name = op.name;
    if (run->sizes.map != "elu") name.append(" ").append(run->sizes.map);
    op.forward(run->operands(), run->options);
    const table::OracleInputs in = run->oracle_inputs();
    const table::OracleForward want = op.oracle_forward(in, run->options);
    record(name + " forward: out", relative_error(run->out.view, want.out), op.bound);
    if (op.has_lse) record(name + " forward: lse", relative_error(run->lse, want.lse), op.bound);
    if (!op.has_backward) continue;
    op.backward(run->operands(), run->options);
    const table::OracleBackward g = op.oracle_backward(in, run->options);
    record(name + " backward: dq", relative_error(run->dq.view, g.dq), op.bound);
    record(name + " backward: dk", relative_error(run->dk.view, g.dk), op.bound);
    record(name + " backward: dv", relative_error(run->dv.view, g.dv), op.bound);
    if (op.has_projections) {
      record(name + " backward: dE", relative_error(run->dE, g.dE), op.bound);
      record(name + " backward: dF", relative_error(run->dF, g.dF), op.bound);
    }
    if (op.gate_dim(run->sizes) > 0) record(name + " backward: dg", relative_error(run->dg.view, g.dg), op.bound);
  }
}

std::vector<const table::Operator*> every_operator() {
  std::vector<const table::Operator*> ops;
  for (const table::Operator& op : table::operators()) ops.push_back(&op);
  return ops;
}

INSTANTIATE_TEST_SUITE_P(Table, OracleSweep, ::testing::ValuesIn(every_operator()),
                         [](const auto& p) { return std::string(p.param->name); });

// Printed after every test: the worst error per operator and tensor over the whole sweep.
class PrintWorst : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("\n| operator: tensor | worst max|fp32 − fp64| / max|fp64| |\n|---|---:|\n");
    for (const auto& [what, error] : worst()) std::printf("| %s | %.2e |\n", what.c_str(), error);
  }
};
const auto* const kPrintWorst = ::testing::AddGlobalTestEnvironment(new PrintWorst);

}  // namespace
}  // namespace linattn
