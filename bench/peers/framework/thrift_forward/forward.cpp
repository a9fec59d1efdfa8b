// Thrift forwarder on Apache Thrift's own C++ library: the framework way to write Slick's
// forwarder (seed 002, section 3.3). The code for the Forwarder service is generated at build
// time by the thrift compiler from examples/thrift/forwarder.thrift (build.sh).
//
// A TNonblockingServer (framed transport, binary protocol, one I/O thread and no worker
// threads, so messages from one client keep their order) whose handler msg(key, payload)
// sends the message on to destination key mod N (Euclidean) through one ForwarderClient per
// destination (framed transport over a blocking socket). A destination's client is opened
// with the first message for it (the destinations may start after the forwarder) and opened
// again after it breaks; the message that met the break is reported on stderr and dropped.
//
// Usage: thrift_forward PORT DEST_HOST:PORT [DEST_HOST:PORT...]   (listens on 127.0.0.1)

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TNonblockingServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TNonblockingServerSocket.h>
#include <thrift/transport/TSocket.h>

#include "Forwarder.h"

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TNonblockingServer;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TNonblockingServerSocket;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;

namespace {

struct Destination {
  std::string host;
  int port;
  std::shared_ptr<TFramedTransport> transport;
  std::unique_ptr<ForwarderClient> client;
};

class ForwarderHandler : public ForwarderIf {
public:
  explicit ForwarderHandler(std::vector<Destination> dests) : dests_(std::move(dests)) {}

  void msg(const int32_t key, const std::string& payload) override {
    const int64_t n = static_cast<int64_t>(dests_.size());
    int64_t m = static_cast<int64_t>(key) % n;
    if (m < 0) m += n;
    Destination& d = dests_[static_cast<size_t>(m)];
    try {
      if (!d.client) {
        auto socket = std::make_shared<TSocket>(d.host, d.port);
        socket->setNoDelay(true);
        d.transport = std::make_shared<TFramedTransport>(socket);
        d.client.reset(new ForwarderClient(std::make_shared<TBinaryProtocol>(d.transport)));
        d.transport->open();
      }
      d.client->msg(key, payload);
    } catch (const TTransportException& e) {
      std::cerr << "thrift_forward: destination " << d.host << ":" << d.port << ": "
                << e.what() << "; message dropped" << std::endl;
      d.client.reset();
      if (d.transport) {
        try {
          d.transport->close();
        } catch (...) {
        }
        d.transport.reset();
      }
    }
  }

private:
  std::vector<Destination> dests_;
};

bool parse_port(const std::string& s, int* port) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > 65535) return false;
  *port = static_cast<int>(v);
  return true;
}

int usage() {
  std::cerr << "usage: thrift_forward PORT DEST_HOST:PORT [DEST_HOST:PORT...]" << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  int port = 0;
  if (!parse_port(argv[1], &port)) {
    std::cerr << "thrift_forward: bad port " << argv[1] << std::endl;
    return 2;
  }
  std::vector<Destination> dests;
  for (int i = 2; i < argc; i++) {
    std::string arg = argv[i];
    size_t colon = arg.rfind(':');
    int dport = 0;
    if (colon == std::string::npos || colon == 0 || !parse_port(arg.substr(colon + 1), &dport)) {
      std::cerr << "thrift_forward: bad destination " << arg << " (want HOST:PORT)" << std::endl;
      return 2;
    }
    dests.push_back(Destination{arg.substr(0, colon), dport, nullptr, nullptr});
  }
  std::signal(SIGPIPE, SIG_IGN);

  auto handler = std::make_shared<ForwarderHandler>(std::move(dests));
  auto processor = std::make_shared<ForwarderProcessor>(handler);
  auto socket = std::make_shared<TNonblockingServerSocket>("127.0.0.1", port);
  TNonblockingServer server(processor, std::make_shared<TBinaryProtocolFactory>(), socket);
  server.setNumIOThreads(1);
  try {
    server.serve();
  } catch (const std::exception& e) {
    std::cerr << "thrift_forward: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
