// SPDX-License-Identifier: MIT
// The two ways of printing a report: aligned "key : value" sections for
// people, one JSON object (stable snake_case keys) for scripts.
#ifndef PHXFS_CHECK_RENDER_HPP
#define PHXFS_CHECK_RENDER_HPP

#include <cstdint>
#include <ostream>
#include <string>

#include "report.hpp"

namespace phxcheck {

void render_text(const Report &report, std::ostream &out);
void render_json(const Report &report, std::ostream &out);

/// "0000:01:00.0" from a PCI domain and bus << 8 | devfn.
[[nodiscard]] std::string pci_address(std::uint32_t domain, std::uint32_t bdf);

}  // namespace phxcheck

#endif  // PHXFS_CHECK_RENDER_HPP
