#pragma once
// One owner type per mbedTLS context: constructed with the context's init function and
// destroyed with its free function, not copyable or movable (mbedTLS contexts hold
// pointers into themselves and to each other). The context is the public member `ctx`,
// passed to mbedTLS as &h.ctx. Private to common/net.

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

namespace starling::net::mbedtls {

template <typename T, void (*Init)(T*), void (*Free)(T*)>
struct Handle {
  T ctx;
  Handle() { Init(&ctx); }
  ~Handle() { Free(&ctx); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

using Entropy = Handle<mbedtls_entropy_context, mbedtls_entropy_init, mbedtls_entropy_free>;
using CtrDrbg = Handle<mbedtls_ctr_drbg_context, mbedtls_ctr_drbg_init, mbedtls_ctr_drbg_free>;
using Pk = Handle<mbedtls_pk_context, mbedtls_pk_init, mbedtls_pk_free>;
using Mpi = Handle<mbedtls_mpi, mbedtls_mpi_init, mbedtls_mpi_free>;
using Crt = Handle<mbedtls_x509_crt, mbedtls_x509_crt_init, mbedtls_x509_crt_free>;
using Crl = Handle<mbedtls_x509_crl, mbedtls_x509_crl_init, mbedtls_x509_crl_free>;
using CrtWriter = Handle<mbedtls_x509write_cert, mbedtls_x509write_crt_init, mbedtls_x509write_crt_free>;
using SslConfig = Handle<mbedtls_ssl_config, mbedtls_ssl_config_init, mbedtls_ssl_config_free>;
using Ssl = Handle<mbedtls_ssl_context, mbedtls_ssl_init, mbedtls_ssl_free>;
using SslSession = Handle<mbedtls_ssl_session, mbedtls_ssl_session_init, mbedtls_ssl_session_free>;
using SslTicket = Handle<mbedtls_ssl_ticket_context, mbedtls_ssl_ticket_init, mbedtls_ssl_ticket_free>;

}  // namespace starling::net::mbedtls
