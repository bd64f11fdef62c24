#include <microhttpd.h>
#include <sys/socket.h>

/* MHD_get_daemon_info is variadic, which Swift cannot import: the daemon's listening
   port (the real one when started with port 0), or 0 if unknown. */
static inline uint16_t storeledger_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/* MHD_get_connection_info is variadic too: the client's socket address, or NULL. */
static inline const struct sockaddr *storeledger_mhd_client_address(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}
