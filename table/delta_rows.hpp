#pragma once
// The delta rule's rows of the operator table (delta_rows.cpp): "delta_rule" (DeltaNet),
// "gated_delta_rule" (Gated DeltaNet) and "kda" (Kimi Delta Attention), through the chunked entry
// points of linattn/delta.hpp with q and k l2-normalised in the operator (what the models use; with
// raw keys of norm > √2 the recurrence itself diverges). β is the row's own input: Operands carries
// none, so each configuration's options hold one drawn β [B, N, H, 1] (and the dβ the backward
// writes, which tests/delta_rule_test.cpp checks against the oracle; the table's readers check dq,
// dk, dv and dg).
#include <vector>

#include "linattn/delta.hpp"
#include "operator_table.hpp"

namespace linattn::table::detail {

// The row of `gate`, with the test cases it shares with the decayed rows and its error bound.
Operator delta_row(DeltaGate gate, std::vector<TestCase> (*test_cases)(), std::vector<TestCase> (*gradient_cases)(),
                   double bound);

// β of a configuration: sigmoid(x) for standard normals x (flash-linear-attention's tests draw β as a
// sigmoid too), [B, N, H] in row-major order, the same for equal sizes.
std::vector<float> draw_beta(const Sizes& s);

}  // namespace linattn::table::detail
