/* gplan-serve's HTTP/1.1 side on libmicrohttpd: routing, request bodies, OpenAI's endpoints over
 * the engine (server/engine.h), server-sent events, /health and /metrics. A thread per connection:
 * a request waits for its job on its own thread and notices a client that went away. */
#ifndef GP_SERVER_HTTP_H
#define GP_SERVER_HTTP_H

#include <stddef.h>

#include "gplan/text.h"
#include "server/engine.h"

typedef struct gp_http gp_http;

typedef struct {
    const char *host;       /* address to listen on */
    int port;               /* 0: any free port (gp_http_port) */
    size_t max_body;        /* bytes a request body may hold; more: 413 */
    int max_connections;
    int timeout_s;          /* an idle connection is closed after it */
    const char *model_name; /* what /v1/models and responses call the model */
    int verbose;            /* libmicrohttpd's messages on stderr */
} gp_http_opts;

/* Listens (/health answers 503 until gp_http_serve). NULL with err. */
gp_http *gp_http_start(const gp_http_opts *o, char *err, size_t err_len);
int gp_http_port(const gp_http *h);
/* The model is loaded: the endpoints serve it once the engine is ready. */
void gp_http_serve(gp_http *h, gp_lm *lm, gp_engine *e);
/* Shutting down: no new connections; requests are refused with 503, running ones go on. */
void gp_http_drain(gp_http *h);
/* Requests being answered. */
int gp_http_active(gp_http *h);
/* Closes every connection and stops; NULL ok. */
void gp_http_stop(gp_http *h);

#endif
