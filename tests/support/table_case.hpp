#pragma once
// One test case of the operator table (table/) made concrete: random fp32 operands in the case's
// storage, the options built once, and the same inputs in fp64 for the oracle.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "operator_table.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

struct TableRun {
  table::Sizes sizes;  // key_lengths points into `lengths`, cu_seqlens into `boundaries`
  std::vector<int64_t> lengths, boundaries;
  Tensor32 q, k, v, dout, out, dq, dk, dv;
  Tensor32 g, dg;  // decayed rows with a gate tensor; empty otherwise
  std::vector<float> lse, E, F, dE, dF;
  std::unique_ptr<RecurrentState> state;
  table::Options options;

  table::Operands operands();
  // q, k, v, dout, E, F and g as fp64 (exactly the fp32 values).
  table::OracleInputs oracle_inputs() const;
};

// Inputs uniform in [−1, 1) (E and F in [−0.2, 0.2); the gate g table::log_decay_of_normal of
// standard normals); the outputs hold NaN until written.
std::unique_ptr<TableRun> make_run(const table::Operator& op, const table::TestCase& c, std::mt19937_64& rng);

// "B=.. Nq=.. Nk=.. H=.. D=.. E=.. <storage> ..." for failure messages.
std::string describe(const table::TestCase& c, const TableRun& run);

}  // namespace linattn::testing
