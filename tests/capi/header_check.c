/* Compiled as C99: proves starling_client.h is a C header, and exercises a few calls
 * the way a C program makes them. */
#include <stddef.h>
#include <string.h>

#include "starling_client.h"

int starling_capi_c_check(void);

/* 0 when the C view of the API behaves; the number of the failed check otherwise. */
int starling_capi_c_check(void) {
  starling_client_config config;
  starling_client* client = NULL;
  starling_client_stats stats;
  starling_client_data_options data_options;
  starling_client_background_config background;
  starling_client_background_stats background_stats;
  uint32_t rows[2];
  size_t count = 1;
  int rc;
  starling_client_config_init(&config);
  if (config.log_level != STARLING_LOG_INFO || config.coordinator != NULL) return 1;
  rc = starling_client_create(&config, &client); /* no coordinator: refused, but explained */
  if (rc != STARLING_ERR_INVALID_ARGUMENT || client == NULL) return 2;
  if (strstr(starling_client_last_error(client), "coordinator") == NULL) return 3;
  if (starling_client_state(client) != STARLING_STATE_FAILED) return 4;
  if (starling_client_run(client) != STARLING_ERR_STATE) return 5;
  if (starling_client_get_stats(client, &stats) != STARLING_OK || stats.rounds_trained != 0) return 6;
  starling_client_background_config_init(&background);
  if (background.struct_size != sizeof background || background.variant != STARLING_SYNC_EASGD ||
      background.alpha != 0.5f)
    return 9;
  if (starling_client_start_background(client, &background) != STARLING_ERR_STATE) return 10;
  if (starling_client_get_background_stats(client, &background_stats) != STARLING_OK || background_stats.running != 0 ||
      background_stats.last_error[0] != '\0')
    return 11;
  if (starling_client_set_sparse_rows(client, 8) != STARLING_ERR_STATE) return 12;
  if (starling_client_set_sparse_rows(NULL, 8) != STARLING_ERR_INVALID_ARGUMENT) return 13;
  if (starling_client_get_sparse_rows(client, rows, 2, &count) != STARLING_ERR_STATE) return 14;
  starling_client_destroy(client);
  starling_client_destroy(NULL);
  if (strlen(starling_client_version()) == 0) return 7;
  starling_client_data_options_init(&data_options);
  if (data_options.struct_size != sizeof data_options || data_options.header != -1) return 8;
  return 0;
}
