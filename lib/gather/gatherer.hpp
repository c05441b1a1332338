// SPDX-License-Identifier: MIT
// The thread behind phx::Gather: operations run one at a time, in the order
// they were posted, with the device's mover (created on that thread's
// first operation, so a Gather that is never used costs nothing).
#ifndef PHOENIX_LIB_GATHERER_HPP
#define PHOENIX_LIB_GATHERER_HPP

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "gather/gather_mover.hpp"
#include "phoenix/gather.hpp"

struct CUstream_st;

namespace phx::detail {

class Gatherer {
 public:
  /// Throws std::system_error(ENOTSUP) when @p engine has no gather mover.
  /// @p options' zeros take @p device_options' values.
  Gatherer(int device_id, Engine engine, EngineCapabilities capabilities, GatherOptions options,
           const Options &device_options);
  ~Gatherer();
  Gatherer(const Gatherer &) = delete;
  Gatherer &operator=(const Gatherer &) = delete;
  Gatherer(Gatherer &&) = delete;
  Gatherer &operator=(Gatherer &&) = delete;

  [[nodiscard]] int device_id() const noexcept { return device_id_; }
  [[nodiscard]] const GatherOptions &options() const noexcept { return options_; }

  /// Queues @p job; it runs on the gatherer's thread with the mover, or
  /// with null and the error that kept the mover from being made.
  void post(std::function<void(GatherMover *mover, const std::exception_ptr &error)> job);

  /// True on the gatherer's own thread (in a callback), where waiting for a
  /// later operation would wait forever.
  [[nodiscard]] bool on_own_thread();

 private:
  void worker() noexcept;

  int device_id_;
  EngineCapabilities capabilities_;
  GatherOptions options_;
  std::unique_ptr<GatherMover> mover_;
  std::exception_ptr mover_error_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void(GatherMover *, const std::exception_ptr &)>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

/// Gather::read_on_stream/write_on_stream (gather_stream.cpp).
void post_stream_ordered(Gatherer &gatherer, Direction dir, std::vector<GatherEntry> entries,
                         GatherResult *result, CUstream_st *stream);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_GATHERER_HPP
