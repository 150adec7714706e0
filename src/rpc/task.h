// rpc/task.h
// Task<T> is an asio C++20 coroutine. block_on runs one to completion from a
// thread that is NOT an I/O thread of the executor (it would deadlock).
#pragma once

#include <asio/experimental/as_tuple.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

namespace weft {

template <class T = void>
using Task = asio::awaitable<T>;

// Completion token that reports errors as a tuple instead of throwing.
inline constexpr auto use_nothrow = asio::experimental::as_tuple(asio::use_awaitable);

template <class T, class Executor>
T block_on(const Executor& ex, Task<T> task) {
  return asio::co_spawn(ex, std::move(task), asio::use_future).get();
}

}  // namespace weft
