#include "common/command.hpp"

#include <utility>

namespace linattn::cli {

// A function-local static: registrars run during static initialisation, in any file order.
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

Registrar::Registrar(Command command) { registry().push_back(std::move(command)); }

}  // namespace linattn::cli
