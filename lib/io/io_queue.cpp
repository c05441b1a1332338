// SPDX-License-Identifier: MIT
// IoQueue: any number of requests of any size over one io_uring.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <string>

#include "core/config.hpp"
#include "core/device_state.hpp"
#include "core/error.hpp"
#include "core/registration_access.hpp"
#include "core/tsan_kernel_memory.hpp"
#include "engines/engine_table.hpp"
#include "io/aligned_io.hpp"
#include "phoenix/phoenix.hpp"

namespace phx {
namespace detail {

class Ring {
 public:
  explicit Ring(unsigned depth) : depth_(depth) {
    if (const int r = io_uring_queue_init(depth_, &ring_, 0); r < 0) {
      throw_errno(-r, "io_uring_queue_init(" + std::to_string(depth_) + ")");
    }
    for_each_kernel_mapping(tsan_kernel_mapped);
  }
  ~Ring() {
    // The kernel may still write into request buffers: reap before leaving.
    while (inflight_ > 0) {
      io_uring_cqe *cqe = nullptr;
      (void)io_uring_submit(&ring_);  // entries a failed submit left behind
      const int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR) {
        continue;
      }
      if (r < 0) {
        break;
      }
      io_uring_cqe_seen(&ring_, cqe);
      --inflight_;
    }
    for_each_kernel_mapping(tsan_kernel_unmapping);
    io_uring_queue_exit(&ring_);
  }
  Ring(const Ring &) = delete;
  Ring &operator=(const Ring &) = delete;
  Ring(Ring &&) = delete;
  Ring &operator=(Ring &&) = delete;

  [[nodiscard]] unsigned depth() const noexcept { return depth_; }
  [[nodiscard]] std::size_t outstanding() const noexcept {
    return inflight_ + waiting_.size() + ready_.size();
  }

  void submit(std::span<const IoRequest> requests) {
    for (const IoRequest &req : requests) {
      enqueue(req);
    }
    pump();
  }

  std::vector<IoCompletion> wait(std::size_t min_completions) {
    min_completions = std::min(min_completions, outstanding());
    while (ready_.size() < min_completions) {
      pump();
      if (inflight_ == 0) {
        break;  // nothing left that could complete
      }
      const int r = io_uring_submit_and_wait(&ring_, 1);
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
        throw_errno(-r, "io_uring_submit_and_wait");
      }
      reap();
    }
    std::vector<IoCompletion> out;
    out.swap(ready_);
    return out;
  }

 private:
  // The ring's memory, which liburing maps without TSan seeing it.
  template <typename Visit>
  void for_each_kernel_mapping(Visit visit) const {
    visit(ring_.sq.ring_ptr, ring_.sq.ring_sz);
    visit(ring_.cq.ring_ptr, ring_.cq.ring_sz);  // the same mapping on single-mmap kernels
    visit(ring_.sq.sqes, sizeof(io_uring_sqe) * ring_.sq.ring_entries);
  }

  struct Op {
    IoRequest req;
    IoPolicy policy;
    std::size_t done = 0;
  };

  void enqueue(const IoRequest &req) {
    if (req.size == 0) {
      ready_.push_back({req.user_data, 0, 0});
      return;
    }
    if (req.file == nullptr || req.file->fd() < 0) {
      ready_.push_back({req.user_data, 0, EBADF});
      return;
    }
    if (req.buffer == nullptr) {
      ready_.push_back({req.user_data, 0, EFAULT});
      return;
    }
    Op op{req, {}, 0};
    op.policy.direct = req.file->direct_io();
    op.policy.offset_align = req.file->offset_alignment();
    op.policy.memory_align = req.file->memory_alignment();
    if (!is_aligned(req.buffer, req.size, req.offset, op.policy)) {
      // O_DIRECT cannot take it as it is: the staged path does it now.
      finish_synchronously(op);
      return;
    }
    std::uint32_t slot = 0;
    if (free_.empty()) {
      slot = static_cast<std::uint32_t>(ops_.size());
      ops_.push_back(op);
    } else {
      slot = free_.back();
      free_.pop_back();
      ops_[slot] = op;
    }
    waiting_.push_back(slot);
  }

  void finish_synchronously(const Op &op) {
    const auto dir = op.req.op == IoOp::read ? Direction::read : Direction::write;
    const TransferResult r = transfer(dir, op.req.file->fd(), op.req.buffer + op.done,
                                      op.req.size - op.done, op.req.offset + op.done, op.policy);
    ready_.push_back({op.req.user_data, op.done + r.done, r.error});
  }

  void pump() {
    unsigned prepared = 0;
    while (!waiting_.empty() && inflight_ < depth_) {
      io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        break;
      }
      const std::uint32_t slot = waiting_.front();
      waiting_.pop_front();
      const Op &op = ops_[slot];
      const std::size_t block = std::max<std::size_t>(op.policy.offset_align, 1);
      const auto len =
          static_cast<unsigned>(std::min(op.req.size - op.done, kMaxSyscallBytes / block * block));
      std::byte *buf = op.req.buffer + op.done;
      const std::uint64_t off = op.req.offset + op.done;
      if (op.req.op == IoOp::read) {
        io_uring_prep_read(sqe, op.req.file->fd(), buf, len, off);
      } else {
        io_uring_prep_write(sqe, op.req.file->fd(), buf, len, off);
      }
      io_uring_sqe_set_data64(sqe, slot);
      ++inflight_;
      ++prepared;
    }
    if (prepared == 0) {
      return;
    }
    int r = 0;
    do {
      r = io_uring_submit(&ring_);
    } while (r == -EINTR);
    // EAGAIN/EBUSY: the entries stay in the submission ring and go with the
    // next submit, after completions have been reaped.
    if (r < 0 && r != -EAGAIN && r != -EBUSY) {
      throw_errno(-r, "io_uring_submit");
    }
  }

  void reap() {
    io_uring_cqe *cqe = nullptr;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      on_completion(static_cast<std::uint32_t>(io_uring_cqe_get_data64(cqe)), cqe->res);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
  }

  void on_completion(std::uint32_t slot, int res) {
    --inflight_;
    Op &op = ops_[slot];
    if (res == -EINTR || res == -EAGAIN) {
      waiting_.push_front(slot);
      return;
    }
    if (res == -EREMOTEIO) {
      // The kernel refused P2P DMA to device memory (see aligned_io.cpp):
      // the synchronous path stages the rest through host memory.
      finish_synchronously(op);
      release(slot);
      return;
    }
    if (res < 0) {
      complete(slot, -res);
      return;
    }
    if (res == 0) {
      complete(slot, op.req.op == IoOp::read ? 0 : EIO);  // read: end of file
      return;
    }
    op.done += static_cast<std::size_t>(res);
    if (op.done == op.req.size) {
      complete(slot, 0);
      return;
    }
    if (!is_aligned(op.req.buffer + op.done, op.req.size - op.done, op.req.offset + op.done,
                    op.policy)) {
      // A short O_DIRECT read ending mid-block is the end of file; the
      // staged path handles what remains and reports it.
      finish_synchronously(op);
      release(slot);
      return;
    }
    waiting_.push_front(slot);
  }

  void complete(std::uint32_t slot, int error) {
    const Op &op = ops_[slot];
    ready_.push_back({op.req.user_data, op.done, error});
    release(slot);
  }

  void release(std::uint32_t slot) { free_.push_back(slot); }

  io_uring ring_{};
  unsigned depth_;
  unsigned inflight_ = 0;
  std::vector<Op> ops_;
  std::vector<std::uint32_t> free_;
  std::deque<std::uint32_t> waiting_;
  std::vector<IoCompletion> ready_;
};

}  // namespace detail

namespace {

unsigned queue_depth(unsigned requested) {
  if (requested != 0) {
    if (requested > 32768) {
      detail::throw_errno(EINVAL, "IoQueue depth " + std::to_string(requested) +
                                      " exceeds io_uring's 32768 entries");
    }
    return requested;
  }
  return Options::defaults().queue_depth;
}

IoRequest make_request(IoOp op, File &file, const Registration &reg, std::size_t reg_offset,
                       std::size_t size, std::uint64_t offset, std::uint64_t user_data) {
  if (!reg || reg_offset > reg.size() || size > reg.size() - reg_offset) {
    detail::throw_io(EINVAL, op == IoOp::read ? "read" : "write", file.path(), offset, size, 0,
                     "registration offset " + std::to_string(reg_offset) +
                         " + size exceeds the registration's " + std::to_string(reg.size()) +
                         " bytes");
  }
  if (const detail::DeviceState *device = detail::RegistrationAccess::device(reg);
      !device->capabilities().io_queue) {
    detail::refuse(device->engine(), "IoRequest", "host view for io_uring",
                   "use File::read/write or read_async");
  }
  return {op, &file, reg.host_view() + reg_offset, size, offset, user_data};
}

}  // namespace

IoRequest IoRequest::read(File &file, const Registration &reg, std::size_t reg_offset,
                          std::size_t size, std::uint64_t offset, std::uint64_t user_data) {
  return make_request(IoOp::read, file, reg, reg_offset, size, offset, user_data);
}

IoRequest IoRequest::write(File &file, const Registration &reg, std::size_t reg_offset,
                           std::size_t size, std::uint64_t offset, std::uint64_t user_data) {
  return make_request(IoOp::write, file, reg, reg_offset, size, offset, user_data);
}

IoQueue::IoQueue(unsigned depth) : ring_(std::make_unique<detail::Ring>(queue_depth(depth))) {}
IoQueue::IoQueue(IoQueue &&) noexcept = default;
IoQueue &IoQueue::operator=(IoQueue &&) noexcept = default;
IoQueue::~IoQueue() = default;

unsigned IoQueue::depth() const noexcept {
  return ring_->depth();
}
void IoQueue::submit(std::span<const IoRequest> requests) {
  ring_->submit(requests);
}
std::size_t IoQueue::outstanding() const noexcept {
  return ring_ ? ring_->outstanding() : 0;
}
std::vector<IoCompletion> IoQueue::wait(std::size_t min_completions) {
  return ring_->wait(min_completions);
}
std::vector<IoCompletion> IoQueue::run(std::span<const IoRequest> requests) {
  const std::size_t before = outstanding();
  submit(requests);
  return wait(before + requests.size());
}

}  // namespace phx
