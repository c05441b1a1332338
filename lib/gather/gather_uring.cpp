// SPDX-License-Identifier: MIT
// The gather mover for engines whose registrations have a host view: every
// request goes to one IoQueue, which feeds the ring as entries free up.
#include <vector>

#include "gather/gather_mover.hpp"

namespace phx::detail {
namespace {

class HostViewMover final : public GatherMover {
 public:
  explicit HostViewMover(unsigned depth) : queue_(depth) {}

  void move(Direction dir, std::span<const PlannedRequest> requests,
            std::span<RequestOutcome> outcomes) override {
    std::vector<IoRequest> batch;
    batch.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const PlannedRequest &r = requests[i];
      batch.push_back({dir == Direction::read ? IoOp::read : IoOp::write, r.file,
                       r.registration->host_view() + r.reg_offset, r.size, r.file_offset, i});
    }
    for (const IoCompletion &c : queue_.run(batch)) {
      outcomes[c.user_data] = {c.bytes, c.error};
    }
  }

 private:
  IoQueue queue_;
};

}  // namespace

std::unique_ptr<GatherMover> make_host_view_mover(unsigned depth) {
  return std::make_unique<HostViewMover>(depth);
}

}  // namespace phx::detail
