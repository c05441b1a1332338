// SPDX-License-Identifier: MIT
#ifndef PHX_TOOLS_UNAVAILABLE_HPP
#define PHX_TOOLS_UNAVAILABLE_HPP

#include <stdexcept>

namespace phxtools {

/// An engine or mode cannot run in this build or on this machine: the tools
/// report it (exit 2, or an "unavailable" record) rather than fail.
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace phxtools

#endif  // PHX_TOOLS_UNAVAILABLE_HPP
