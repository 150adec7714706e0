// rpc/server_connection.h (internal to rpc)
// The server end of one connection: the Hello handshake (cluster token),
// then requests handed to Server::dispatch, with back-pressure on the
// number of requests and payload bytes in progress, and a close when its
// replies stop being written (ServerOptions::write_stall_timeout_ms), and a
// close when no Hello arrives in time (ServerOptions::hello_timeout_ms).
// Threading: everything runs on the connection's executor.
#pragma once

#include <asio/steady_timer.hpp>

#include "rpc/frame_stream.h"
#include "rpc/server_state.h"

namespace weft::rpc {

// The largest Hello body a server reads (a token, a name, an id: far less).
inline constexpr size_t kHelloBodyMax = 64 << 10;

class ServerConnection final : public FrameStream {
 public:
  ServerConnection(Socket socket, std::shared_ptr<ServerState> server);
  ~ServerConnection() override;

  // Starts reading, and the Hello timer.
  void serve();

  // Sends the reply of `call` (on this connection's executor).
  void reply(const std::shared_ptr<ServerCall>& call, const Status& status);

 protected:
  Status check_header(const FrameHeader& h) override;
  PayloadTarget payload_target(const FrameHeader& h) override;
  void on_frame(const FrameHeader& h, std::string body, PayloadTarget payload) override;
  void on_closed(const Status& why) override;
  bool should_pause_reading() override;
  bool prefer_immediate_write() override { return inflight_ == 0; }
  void on_write_stalled(std::chrono::steady_clock::duration stalled_for) override;
  void on_read_stalled(std::chrono::steady_clock::duration stalled_for) override;

 private:
  void handle_hello(const FrameHeader& h, const std::string& body);
  void on_hello_timeout();
  void send_reply(const FrameHeader& request, uint16_t status, std::string body);

  std::shared_ptr<ServerState> state_;
  ServerState& server_;
  bool authenticated_ = false;
  bool hello_seen_ = false;  // handle_hello ran (whatever it answered)
  uint64_t client_id_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> held_ = std::make_shared<std::atomic<uint64_t>>(0);  // ServerCall::connection_held
  size_t inflight_ = 0;
  size_t inflight_bytes_ = 0;
  asio::steady_timer hello_timer_;  // armed from serve() until a Hello arrives
};

}  // namespace weft::rpc
