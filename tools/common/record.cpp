// SPDX-License-Identifier: MIT
#include "record.hpp"

namespace phxtools {

void print_record(std::ostream &out, const nlohmann::json &record) {
  out << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n'
      << std::flush;
}

}  // namespace phxtools
