// One lane connection: plain TCP, or TLS 1.3 over it for WAN links marked
// `tls: true`. Reads and writes are whole (like asio::async_read/async_write)
// and report errors as values. One reader and one writer at a time, both on the
// connection's io_context. Asio's SSL layer stays in lanes/stream.cpp.
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <tuple>

namespace gridbcast::lanes {

class TlsContext;
struct TlsSession;

class Stream {
 public:
  using IoResult = std::tuple<asio::error_code, std::size_t>;

  explicit Stream(asio::ip::tcp::socket socket);
  ~Stream();
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;

  // Runs the TLS handshake over this (so far plain) connection, as server or
  // client, with `ctx`'s certificate; the peer must present one the grid CA
  // signed. On failure the error is returned; tls_failure() says why.
  asio::awaitable<asio::error_code> start_tls(TlsContext& ctx, bool server);
  // Why the handshake (or the first read after it) failed, for error messages:
  // "certificate has expired", "unknown CA (...)", or the TLS alert the peer sent.
  std::string tls_failure(const asio::error_code& ec) const;
  // Empty when the peer's certificate names `node` (a DNS subject alternative
  // name or the subject CN); else "certificate is for node X, expected NODE".
  std::string check_peer_name(const std::string& node) const;
  bool tls() const { return tls_ != nullptr; }

  // The end of a TLS connection without close_notify reads as asio::error::eof,
  // like plain TCP, so callers tell "the peer went away" the same way.
  asio::awaitable<IoResult> read(asio::mutable_buffer buffer);
  // What has arrived, at least one byte (or an error, with none): a segment
  // read in pieces, each forwarded as it lands (runtime/executor.cpp).
  asio::awaitable<IoResult> read_some(asio::mutable_buffer buffer);
  asio::awaitable<IoResult> write(std::span<const asio::const_buffer> buffers);
  asio::awaitable<IoResult> write(asio::const_buffer buffer);

  // The TCP socket (under TLS when there is TLS), e.g. for options and addresses.
  asio::ip::tcp::socket& socket();
  // Caps the rate the kernel sends this connection's data at (SO_MAX_PACING_RATE,
  // payload bytes per second); 0 takes the cap away. A call with the pace the
  // socket already has costs nothing. Throws NetworkError if the kernel refuses.
  void set_pace(double bytes_per_second);
  double pace() const { return pace_; }
  // The plain socket itself; only for connections without TLS (the control channel).
  asio::ip::tcp::socket release_plain() &&;
  bool is_open();
  void close();

 private:
  std::unique_ptr<asio::ip::tcp::socket> plain_;
  std::unique_ptr<TlsSession> tls_;
  double pace_ = 0;
};

}  // namespace gridbcast::lanes
