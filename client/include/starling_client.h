/*
 * starling_client.h: the embeddable Starling client, as a C API (C99).
 *
 * An application creates a client from a configuration, hands it its training data
 * (arrays, a callback, or IDX files), and runs it against a coordinator: the client
 * connects over mutual TLS, trains on the data in the rounds the coordinator
 * assigns, sends compressed updates, reconnects by itself after failures, and
 * returns when the coordinator says training is complete. docs/embedding.md has the
 * whole story; examples/embed/embed.c is a complete program.
 *
 *   starling_client_config config;
 *   starling_client_config_init(&config);
 *   config.coordinator = "coordinator.example:7443";
 *   config.ca_file = "ca.crt"; config.cert_file = "client-3.crt"; config.key_file = "client-3.key";
 *   starling_client* client = NULL;
 *   if (starling_client_create(&config, &client) != STARLING_OK) { ...last_error...; }
 *   starling_client_set_data_u8(client, pixels, labels, n, 784, 10, 1.0f / 255);
 *   int rc = starling_client_run(client);       (blocks until done, failed or stopped)
 *   starling_client_destroy(client);
 *
 * Status codes. Every function that can fail returns an int: STARLING_OK (0) or one
 * of the STARLING_ERR_* codes below, and then starling_client_last_error() says why
 * in a sentence a person can act on ("cannot read 'certs/client-3.crt': ...").
 * No C++ exception ever crosses this API.
 *
 * Threads. A client is driven by one thread at a time, its "owner": create, the
 * set_data functions, set_sparse_rows, run, start_background, train_step,
 * join_background, get_model, get_sparse_rows, last_error and destroy must not
 * overlap on one client.
 * starling_client_run() runs the whole federation on the calling thread (it brings
 * its own event loop; it starts no threads). starling_client_start_background()
 * instead starts one thread of the library's, which runs the federation while the
 * owner trains with starling_client_train_step() (never waiting on the network) until
 * join_background() or destroy() has ended that thread. The exceptions, callable from
 * any thread at any time between create and destroy, even while run() is in progress
 * or the background thread runs: starling_client_stop(), starling_client_state(),
 * starling_client_get_stats() and starling_client_get_background_stats().
 * Separate clients are independent (an application may run several, one per thread).
 *
 * Ownership. The library copies everything it is given (configuration strings, data
 * arrays); the caller may free them as soon as the call returns. Strings the library
 * returns belong to it; their lifetime is stated per function.
 */
#ifndef STARLING_CLIENT_H
#define STARLING_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STARLING_CLIENT_API __attribute__((visibility("default")))
#else
#define STARLING_CLIENT_API
#endif

/* ---- status codes ------------------------------------------------------------ */

#define STARLING_OK 0
#define STARLING_ERR_INVALID_ARGUMENT 1 /* a NULL pointer, a bad address, inconsistent sizes */
#define STARLING_ERR_NOT_FOUND 2        /* a file is missing */
#define STARLING_ERR_IO 3               /* a file or socket error; retries gave up */
#define STARLING_ERR_MALFORMED 4        /* a file, certificate or peer message does not parse */
#define STARLING_ERR_UNAUTHENTICATED 5  /* TLS: certificate refused, by either side */
#define STARLING_ERR_STATE 6            /* not now: run() without data, run() twice at once, ... */
#define STARLING_ERR_STOPPED 7          /* run() returned because of starling_client_stop() */
#define STARLING_ERR_CALLBACK 8         /* the data callback returned non-zero */
#define STARLING_ERR_TASK 9             /* the coordinator's task does not fit this client's data */
#define STARLING_ERR_INTERNAL 10        /* a bug or out of memory; the message says what */
#define STARLING_ERR_AGAIN 11           /* not yet: background training has no model before its first round */

/* ---- configuration ---------------------------------------------------------- */

/* Log levels, for starling_client_config.log_level and the log callback. */
#define STARLING_LOG_TRACE 0
#define STARLING_LOG_DEBUG 1
#define STARLING_LOG_INFO 2
#define STARLING_LOG_WARN 3
#define STARLING_LOG_ERROR 4
#define STARLING_LOG_OFF 6

/*
 * A log line: level is a STARLING_LOG_* value, line is the message without a newline
 * (no timestamp: add your own). Called on the thread that runs starling_client_run()
 * (or create/set_data for their messages); line is valid only during the call. It
 * must not call back into the same client, except for stop, state and get_stats.
 */
typedef void (*starling_log_fn)(void* user, int level, const char* line);

/*
 * Fill starling_client_config_init()'s defaults in, then set what you need.
 * Strings are copied by starling_client_create(); NULL means "not given".
 */
typedef struct starling_client_config {
  /* The coordinator, "HOST:PORT" (IPv6 as "[::1]:7443"), or several, comma-separated
   * (e.g. two relays): after a failure the client tries the next in turn. Required. */
  const char* coordinator;

  /* Mutual TLS: the CA that signed the coordinator's certificate, and this client's
   * certificate and private key, as PEM. For each of the three give either a file
   * path (*_file) or the PEM text itself (*_pem, NUL-terminated); the text wins when
   * both are given. */
  const char* ca_file;
  const char* cert_file;
  const char* key_file;
  const char* ca_pem;
  const char* cert_pem;
  const char* key_pem;

  /* The host name the coordinator's certificate must carry; NULL = the HOST of
   * `coordinator`. */
  const char* server_name;

  /* This client's name in logs and Hello ("client-3"). Informative only: the
   * coordinator identifies clients by their certificate. NULL = "client". */
  const char* client_id;

  /* Seed of local randomness (minibatch sampling, reconnect jitter). Default 0. */
  uint64_t seed;

  /* Time allowed for connecting plus the TLS handshake. Default 10000 ms. */
  uint32_t handshake_timeout_ms;
  /* Reconnects start after backoff_initial_ms and double up to backoff_max_ms, with
   * jitter. Defaults 200 ms and 5000 ms. */
  uint32_t backoff_initial_ms;
  uint32_t backoff_max_ms;
  /* run() fails after this long without being welcomed by the coordinator.
   * Default 300000 ms (5 minutes). */
  uint32_t give_up_after_ms;

  /* Least severe level logged. Default STARLING_LOG_INFO. */
  int log_level;
  /* Where log lines go: log(log_user, level, line), or standard error when NULL. */
  starling_log_fn log;
  void* log_user;

  /* Non-zero: every reconnect does a full TLS handshake. Default 0: the client offers
   * the session ticket of its last connection and resumes without the certificates'
   * signatures (docs/transport.md, "Resumption"). */
  int disable_tls_resumption;
} starling_client_config;

/* Sets every field of *config to its default (strings NULL). Any thread. */
STARLING_CLIENT_API void starling_client_config_init(starling_client_config* config);

/* ---- life cycle ------------------------------------------------------------- */

/* The opaque client. */
typedef struct starling_client starling_client;

/*
 * Creates a client: checks the configuration, reads the certificate files and sets
 * up TLS; it does not connect yet. On success *out is a new client in state
 * STARLING_STATE_IDLE. On failure *out is still set whenever memory allows (NULL
 * only when out of memory), to a client that can only explain itself through
 * starling_client_last_error() (e.g. "cannot read 'client-3.crt': No such file or
 * directory") and must be destroyed; every other call on it returns
 * STARLING_ERR_STATE. (sqlite3_open() works the same way.)
 * Returns STARLING_ERR_INVALID_ARGUMENT when config or out is NULL.
 */
STARLING_CLIENT_API int starling_client_create(const starling_client_config* config, starling_client** out);

/*
 * Frees the client and everything it holds. NULL is a no-op. Must not be called
 * while starling_client_run() is in progress on the client (stop it and wait for
 * run() to return first). Background training still running is stopped and its
 * thread joined first. Owner thread.
 */
STARLING_CLIENT_API void starling_client_destroy(starling_client* client);

/*
 * Why the last failing call on this client failed, or "" when none has. The string
 * belongs to the client and stays valid until the next call on it from the owner
 * thread, or until destroy. NULL gives a static message. Owner thread.
 */
STARLING_CLIENT_API const char* starling_client_last_error(const starling_client* client);

/* The library's version, e.g. "0.1.0" (static storage). Any thread. */
STARLING_CLIENT_API const char* starling_client_version(void);

/* ---- training data ------------------------------------------------------------
 * Each set_data function replaces the client's data set with a private copy (the
 * library never reads the caller's memory after the call returns), and forgets the
 * model of a previous run. Labels are class numbers 0 .. num_classes - 1; the
 * coordinator's model must take feature_dim inputs and have num_classes outputs, or
 * run() fails with STARLING_ERR_TASK. Not while run() is in progress (STARLING_ERR_STATE).
 * Owner thread.
 */

/*
 * Bytes, e.g. images: features[i * feature_dim + j] is feature j of example i, and
 * the model sees it as features[...] * scale (1.0f / 255 for pixels). The copy is
 * stored as bytes (count * feature_dim bytes plus 4 bytes a label): the compact choice.
 */
STARLING_CLIENT_API int starling_client_set_data_u8(starling_client* client, const uint8_t* features,
                                                    const int32_t* labels, size_t count, size_t feature_dim,
                                                    int num_classes, float scale);

/* Floats, same layout; the copy is stored as floats (4 bytes a feature). */
STARLING_CLIENT_API int starling_client_set_data_f32(starling_client* client, const float* features,
                                                     const int32_t* labels, size_t count, size_t feature_dim,
                                                     int num_classes);

/*
 * Fills example `index` (0 <= index < count): writes feature_dim floats to
 * features_out and its class to *label_out; returns 0, or non-zero to abort.
 */
typedef int (*starling_fill_fn)(void* user, size_t index, float* features_out, int32_t* label_out);

/*
 * Data through a callback: fill(user, i, ...) is called once for each i in order
 * 0 .. count - 1, on the calling thread and before this function returns; the
 * examples are copied into the client as floats (count * feature_dim * 4 bytes).
 * The callback is not kept: training never calls back. A non-zero return from
 * fill aborts with STARLING_ERR_CALLBACK (the previous data set is kept).
 */
STARLING_CLIENT_API int starling_client_set_data_callback(starling_client* client, size_t count, size_t feature_dim,
                                                          int num_classes, starling_fill_fn fill, void* user);

/*
 * IDX files (the MNIST / Fashion-MNIST format, optionally gzip-compressed): an
 * images file of unsigned bytes and a labels file. Pixels are scaled by 1/255.
 * num_classes = 0 infers it as the largest label + 1; give it (10 for
 * Fashion-MNIST) when a shard may lack the last class. Errors name the file.
 */
STARLING_CLIENT_API int starling_client_set_data_idx(starling_client* client, const char* images_path,
                                                     const char* labels_path, int num_classes);

/*
 * Regression: real targets, one per example (features as in set_data_f32). The
 * coordinator's task must be a regression (model with one output, /mse or /huber).
 */
STARLING_CLIENT_API int starling_client_set_data_f32_targets(starling_client* client, const float* features,
                                                             const float* targets, size_t count, size_t feature_dim);

/*
 * A data file, read as starling-client --data reads it: CSV, LIBSVM/SVMlight, NumPy
 * .npy/.npz or an IDX directory, gzipped or not. format: NULL or "auto" (from the
 * name), "csv", "libsvm", "npy", "npz", "idx"; label: NULL for the default (CSV: the
 * last column; NPZ: the array "y"), else a CSV column by header name or 0-based index,
 * or an NPZ array name; task: NULL or "classification", "binary", "regression" (how
 * the labels are read and checked). Malformed input fails naming the file and line.
 */
STARLING_CLIENT_API int starling_client_set_data_file(starling_client* client, const char* path, const char* format,
                                                      const char* label, const char* task);

/*
 * The options of starling_client_set_data_file_ex(), as starling-client's data flags.
 * Fill starling_client_data_options_init()'s defaults in, then set what you need. Later
 * versions of the library may append fields: struct_size (set by init) tells the
 * library which fields this caller's struct has, so a program built against this
 * header keeps working with a newer library. Strings are copied; NULL means "not given".
 */
typedef struct starling_client_data_options {
  /* sizeof(starling_client_data_options) as the caller was compiled; set by init. */
  size_t struct_size;
  /* As in starling_client_set_data_file(). */
  const char* format;
  const char* label;
  const char* task;
  /* CSV: the first row names the columns: 1 yes, 0 no, -1 (default) detect. */
  int header;
  /* CSV: columns holding categories, comma-separated header names ("city, device");
   * each is one-hot over categorical_buckets hashed slots (FNV-1a: the same slot on
   * every client). Default NULL (none). */
  const char* categorical;
  /* Hashed slots per categorical column, 1 .. 2^20. Default 16. */
  uint32_t categorical_buckets;
  /* Keep shard shard_index of shard_count (0 = the whole file), cut by partition:
   * "iid" (the default when NULL), "dirichlet:ALPHA", "classes:K", "by-column:NAME"
   * (a CSV column, e.g. a user id, read as groups: whole groups per shard, not a
   * feature) or "files:DIR" (shard I is the I-th data file of DIR by name; path must
   * then be NULL). partition_seed seeds it; every client of a federation gives the
   * same. Defaults 0, 0, NULL, 1. */
  uint32_t shard_index;
  uint32_t shard_count;
  const char* partition;
  uint64_t partition_seed;
  /* Most bytes the data may take in memory; a larger file is refused before it is
   * read. 0 (default) = what the process may still allocate. */
  uint64_t memory_limit_bytes;
} starling_client_data_options;

/* Sets every field of *options to its default. Any thread. */
STARLING_CLIENT_API void starling_client_data_options_init(starling_client_data_options* options);
/*
 * starling_client_set_data_file() with the options above (NULL options = the
 * defaults). STARLING_ERR_INVALID_ARGUMENT for an options struct whose struct_size is
 * not one this library knows (init not called), or an option out of range; errors in
 * the file name the file and line.
 */
STARLING_CLIENT_API int starling_client_set_data_file_ex(starling_client* client, const char* path,
                                                         const starling_client_data_options* options);

/* Examples in the current data set (0 before any set_data). Owner thread. */
STARLING_CLIENT_API size_t starling_client_data_size(const starling_client* client);

/* ---- running ----------------------------------------------------------------- */

/*
 * Joins the federation and trains until the coordinator says training is complete:
 * blocks the calling thread, which runs the client's own event loop, the TLS
 * connection and the training. Reconnects with backoff after disconnects. Returns
 * STARLING_OK when training is complete; STARLING_ERR_STOPPED after
 * starling_client_stop(); STARLING_ERR_STATE without data or when a run is already
 * in progress; STARLING_ERR_UNAUTHENTICATED when the TLS handshake is refused;
 * STARLING_ERR_TASK when the coordinator's model cannot train on the data; another
 * code when no session could be had for give_up_after_ms. Each run starts from a
 * fresh model (the coordinator brings the client up to date). Owner thread.
 */
STARLING_CLIENT_API int starling_client_run(starling_client* client);

/*
 * Asks a run() in progress to return STARLING_ERR_STOPPED soon: at once while it is
 * waiting on the network, or when the local training in progress (one round's
 * steps) ends. The connection is dropped; the coordinator treats the client as gone.
 * When no run() is in progress, the next run() returns STARLING_ERR_STOPPED at once
 * (so a stop that races with the start of run() is never lost). Background training
 * is stopped the same way: its thread drops the connection and ends (within a step of
 * the app's when it waits for them); join_background() then returns STARLING_ERR_STOPPED.
 * Returns at once.
 * Any thread; not async-signal-safe (it takes a lock): a signal handler should
 * wake a thread that calls it.
 */
STARLING_CLIENT_API void starling_client_stop(starling_client* client);

/* ---- status and statistics ---------------------------------------------------- */

#define STARLING_STATE_IDLE 0       /* created, or a run() returned STOPPED */
#define STARLING_STATE_CONNECTING 1 /* run() in progress, no session with the coordinator yet */
#define STARLING_STATE_TRAINING 2   /* run() in progress, joined the federation (possibly reconnecting) */
#define STARLING_STATE_DONE 3       /* the last run() returned STARLING_OK: training complete */
#define STARLING_STATE_FAILED 4     /* the last run() (or create) failed; last_error says why */

/* The client's state, a STARLING_STATE_* value (FAILED for NULL). Any thread. */
STARLING_CLIENT_API int starling_client_state(const starling_client* client);

typedef struct starling_client_stats {
  uint64_t rounds_trained;  /* updates sent */
  uint64_t rounds_accepted; /* ... that the coordinator accepted */
  uint64_t rounds_rejected; /* ... that it rejected */
  uint64_t connections;     /* sessions established (1 + reconnects) */
  uint64_t resyncs;         /* dense models received */
  uint64_t bytes_up;        /* update payload bytes sent */
  uint64_t bytes_down;      /* round assignment bytes received */
  uint64_t held_round;      /* the global model round this client holds (0 = none yet) */
  uint64_t model_checksum;  /* checksum of that model, as the coordinator computes it */
  double last_loss;         /* training loss at the end of the last round */
} starling_client_stats;

/*
 * Copies the statistics of the current (or last) run into *out. While run() is in
 * progress they are a consistent snapshot at most ~100 ms old (and not updated in
 * the middle of a round's training). Any thread.
 */
STARLING_CLIENT_API int starling_client_get_stats(const starling_client* client, starling_client_stats* out);

/*
 * The global model as this client last held it (after run() returned): copies up
 * to `capacity` floats into out (out may be NULL when capacity is 0) and sets
 * *count to the model's number of parameters. After a run that trained the compact
 * model of its sparse rows (starling_client_set_sparse_rows), that compact model:
 * starling_client_get_sparse_rows() says which features its inputs are.
 * STARLING_ERR_STATE while running or before any run. After start_background (while
 * the background thread runs and after it has ended): the app's live model, copied
 * under the lock train_step takes; STARLING_ERR_AGAIN before the first round has
 * brought it. Owner thread.
 */
STARLING_CLIENT_API int starling_client_get_model(starling_client* client, float* out, size_t capacity, size_t* count);

/* ---- sparse models ------------------------------------------------------------- */

/*
 * Sparse rows (docs/sparse.md; starling-client's --sparse-rows B). With bucket > 0,
 * the next run() offers the coordinator the first-layer rows this client's data
 * touches (the features with a non-zero value in some example), grouped in buckets
 * of `bucket` consecutive rows; when the coordinator takes them (its Welcome says
 * so), the client trains, receives and sends only the parameters of the rows its
 * buckets cover plus the dense rest of the network: the compact model, which learns
 * what the whole model would on this data (weight decay aside: docs/sparse.md). For
 * linear, mlp and embedbag models over sparse data (a LIBSVM file, or arrays that are
 * mostly zeros). 0 (the default) offers nothing and trains the whole model.
 *
 * Privacy: a row set tells the coordinator which (hashed) features this client's
 * data holds, e.g. which words occur in a user's mail. Buckets of B rows reveal only
 * which blocks of B consecutive rows are touched, not which rows; they do not hide
 * the number of blocks, nor changes between a client's row sets over time.
 * Bytes: the offer travels in every Hello, coded as top-k indices (3,442 bytes for
 * 5,334 of 65,536 rows); each round then moves the parameters of the covered rows
 * instead of the whole model (docs/sparse.md measures 63,608 against 786,444
 * assignment bytes a round). Larger buckets shrink the offer but cover, and move,
 * every row of each touched block: once a bucket spans the gap between touched rows
 * it saves almost nothing (688,140 bytes with buckets of 64 there).
 *
 * When the coordinator does not take the rows (its train.sparse-rows is off; its
 * model has no first-layer rows, e.g. a CNN; a categorical vocabulary or centred
 * feature scaling re-codes the features), the client trains the whole model as
 * without this option and logs so at level INFO; the coordinator's log says why.
 * Data that does not fit the coordinator's model (another number of features) makes
 * run() fail with STARLING_ERR_TASK, as without sparse rows; so does data that
 * touches no feature at all (there is nothing to offer).
 *
 * Background training cannot offer rows (the app's examples never reach the
 * library): starling_client_start_background() returns STARLING_ERR_STATE while
 * bucket > 0. Takes effect at the next run(). STARLING_ERR_INVALID_ARGUMENT for a
 * bucket above 2^30; STARLING_ERR_STATE while run() or background training is in
 * progress, or on a client that failed to be created. Owner thread.
 */
STARLING_CLIENT_API int starling_client_set_sparse_rows(starling_client* client, uint32_t bucket);

/*
 * The features the inputs of starling_client_get_model()'s model are, after a run
 * that trained the compact model: copies up to `capacity` of them into out (out may
 * be NULL when capacity is 0), ascending, and sets *count to their number. The
 * compact model is the coordinator's network over *count inputs (linear:1048576-2
 * becomes linear:COUNT-2): its input k is feature out[k], and its parameters are the
 * whole model's at those rows then the dense rest, in the whole model's order.
 * *count is 0 when the last run trained the whole model (no sparse rows, or the
 * coordinator did not take them), and under background training (the live model is
 * the whole model). STARLING_ERR_STATE while run() is in progress or before any run.
 * Owner thread.
 */
STARLING_CLIENT_API int starling_client_get_sparse_rows(starling_client* client, uint32_t* out, size_t capacity,
                                                        size_t* count);

/* ---- training in the background (ShadowSync) -------------------------------------
 * The application runs its own training loop and the library synchronizes in a thread
 * of its own: starling_client_train_step() makes one SGD step on the library's live
 * model x on the calling thread; at each round the background thread mixes the newest
 * global model x_c into x, waits until the app has made the round's tau steps (or the
 * round's time budget has passed), sends the difference of a snapshot of x from x_c,
 * compressed with the uplink's error feedback as run() does, over the same mutual TLS
 * session with the same reconnects. docs/embedding.md, "Training in the background
 * (ShadowSync)", has the design, the memory cost and a measured run;
 * examples/embed/background.c is a complete program.
 *
 *   starling_client_background_config bg;
 *   starling_client_background_config_init(&bg);
 *   bg.feature_dim = 784; bg.num_classes = 10;
 *   starling_client_start_background(client, &bg);     (returns at once)
 *   while (starling_client_state(client) == STARLING_STATE_CONNECTING ||
 *          starling_client_state(client) == STARLING_STATE_TRAINING) {
 *     ...the app's next minibatch...
 *     int rc = starling_client_train_step(client, x, y, 32, &loss);  (STARLING_ERR_AGAIN: no model yet)
 *   }
 *   rc = starling_client_join_background(client);       (STARLING_OK: training complete)
 *
 * The lock between the two threads guards x: train_step holds it for its step, the
 * background thread for one copy or mix of the model, never across network I/O.
 */

/* Variants, for starling_client_background_config.variant. */
#define STARLING_SYNC_EASGD 0 /* S-EASGD: x <- x - alpha (x - x_c), the elastic pull */
#define STARLING_SYNC_MA 1    /* S-MA: x <- x_c + (x - s), s the snapshot last sent */

/*
 * Fill starling_client_background_config_init()'s defaults in, then set what you need.
 * struct_size (set by init) lets later versions append fields.
 */
typedef struct starling_client_background_config {
  /* sizeof(starling_client_background_config) as the caller was compiled; set by init. */
  size_t struct_size;
  /* STARLING_SYNC_EASGD (default) or STARLING_SYNC_MA. */
  int variant;
  /* S-EASGD's elastic coefficient alpha, in (0, 1]. Default 0.5. (S-MA ignores it.) */
  float alpha;
  /* The app's examples: feature_dim floats each, labels 0 .. num_classes - 1 (2 for a
   * binary task). The coordinator's model must match, or the background thread ends
   * with STARLING_ERR_TASK. Required. */
  size_t feature_dim;
  int num_classes;
  /* The examples the app trains on, announced to the coordinator as this client's
   * weight in the average; 0 (default): weighted by the examples of its steps. */
  uint64_t num_examples;
  /* A round's longest wait for the app's tau steps; 0 (default): 90% of the round's
   * deadline (without one: until the steps are made). A round with no step at all
   * sends nothing: the client leaves and joins again, as after a timeout. */
  uint32_t max_wait_ms;
} starling_client_background_config;

/* Sets every field of *config to its default. Any thread. */
STARLING_CLIENT_API void starling_client_background_config_init(starling_client_background_config* config);

/*
 * Starts background training and returns at once: a thread of the library's joins the
 * federation (state CONNECTING, then TRAINING) and synchronizes the live model each
 * round until training is complete (state DONE), a failure (FAILED) or
 * starling_client_stop() (IDLE). Needs no set_data call: the data stay with the app.
 * STARLING_ERR_STATE while run() or another background training is in progress (join
 * it first); STARLING_ERR_INVALID_ARGUMENT for a bad configuration (a NULL config,
 * init not called, alpha outside (0, 1], no feature_dim, num_classes < 2, an unknown
 * variant). Each start begins from the coordinator's model. Owner thread.
 */
STARLING_CLIENT_API int starling_client_start_background(starling_client* client,
                                                         const starling_client_background_config* config);

/*
 * One SGD step on the live model over n examples (features: n * feature_dim floats,
 * labels: n classes), with the task's optimizer (momentum, weight decay, clipping) and
 * the last round's learning rate; writes the minibatch's loss to *loss_out unless it
 * is NULL. Runs on the calling thread and never waits on the network: at most for the
 * background thread's copy or mix of the model (one pass over its parameters).
 * STARLING_ERR_AGAIN before the first round has brought the model (keep calling, or
 * wait for state TRAINING and then some); STARLING_ERR_INVALID_ARGUMENT for NULL arrays,
 * n = 0 or a label out of range; STARLING_ERR_STATE without background training. After
 * the background thread has ended, steps still train the model, which is then no
 * longer synchronized. The library reads the arrays during the call only. Owner thread.
 */
STARLING_CLIENT_API int starling_client_train_step(starling_client* client, const float* features,
                                                   const int32_t* labels, size_t n, float* loss_out);

/*
 * Waits for the background thread to end (training complete, a failure, or after
 * starling_client_stop()) and returns what starling_client_run() would have:
 * STARLING_OK when training is complete, STARLING_ERR_STOPPED after a stop, another
 * code with last_error() saying why. The live model stays readable with get_model()
 * (and trainable) until the next start or destroy. STARLING_ERR_STATE without
 * background training. Owner thread.
 */
STARLING_CLIENT_API int starling_client_join_background(starling_client* client);

typedef struct starling_client_background_stats {
  uint64_t steps;                /* train_step calls that trained */
  uint64_t rounds_synced;        /* updates made from a snapshot of the app's model */
  uint64_t rounds_empty;         /* rounds in which the app made no step: nothing sent */
  uint64_t mixes;                /* global models mixed into the app's model */
  double last_loss;              /* the loss of the app's last step */
  uint64_t lock_waits;           /* steps that waited for the background thread's copy or mix of the model */
  uint64_t longest_lock_wait_us; /* ... and the longest such wait, in microseconds */
  int running;                   /* 1 while the background thread runs */
  int sync_status;               /* STARLING_OK while running or after success, else the code it ended with */
  char last_error[256];          /* the last reason a round sent nothing, or the thread ended; "" = none */
} starling_client_background_stats;

/*
 * Background training's counters (all zero before any start), a consistent snapshot;
 * the federation's own (updates accepted, bytes) stay in starling_client_get_stats().
 * Any thread.
 */
STARLING_CLIENT_API int starling_client_get_background_stats(const starling_client* client,
                                                             starling_client_background_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* STARLING_CLIENT_H */
