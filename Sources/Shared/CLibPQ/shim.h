#include <libpq-fe.h>

// libpq's diagnostic field codes are character-literal macros ('C', 'M', ...), which Swift
// cannot import; these shims hand the same codes to Swift.
static inline int sl_pq_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
static inline int sl_pq_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }
static inline int sl_pq_diag_message_detail(void) { return PG_DIAG_MESSAGE_DETAIL; }
static inline int sl_pq_diag_message_hint(void) { return PG_DIAG_MESSAGE_HINT; }
static inline int sl_pq_diag_constraint_name(void) { return PG_DIAG_CONSTRAINT_NAME; }
