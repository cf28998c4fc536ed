package gateway

import (
	"net/http"
	"strconv"
)

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	draining := g.draining.Load() || g.unready.Load()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case draining:
		setRetryAfter(w.Header(), http.StatusServiceUnavailable)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("draining\n"))
	case g.cur.Load() == nil:
		setRetryAfter(w.Header(), http.StatusServiceUnavailable)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("no policy\n"))
	default:
		_, _ = w.Write([]byte("ready\n"))
	}
}

// modelsAuthed wraps a model endpoint with the API key check, refusing
// in the format of the client: Anthropic's for a request with
// anthropic-version (what anthropic-sdk-go sends), else OpenAI's. Its
// answers carry a request id, as the doors' do.
func (g *Gateway) modelsAuthed(h http.HandlerFunc) http.HandlerFunc {
	chat, msgs := g.authed(chatDoor{}, h), g.authed(messagesDoor{}, h)
	return func(w http.ResponseWriter, r *http.Request) {
		refusedID(w, r, modelsDoor(r))
		if modelsDoor(r) == (messagesDoor{}) {
			msgs(w, r)
			return
		}
		chat(w, r)
	}
}

// modelsDoor is the format a model endpoint answers r in.
func modelsDoor(r *http.Request) door {
	if r.Header.Get("Anthropic-Version") != "" {
		return messagesDoor{}
	}
	return chatDoor{}
}

// models lists the routes, in OpenAI's model-list shape (Anthropic's for
// a request with anthropic-version).
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	gen := g.modelsGen(w, r)
	if gen == nil {
		return
	}
	defer gen.release()
	w.Header().Set("Content-Type", "application/json")
	if modelsDoor(r) == (messagesDoor{}) {
		_, _ = w.Write(appendAnthropicModels(nil, gen.names, gen.created))
		return
	}
	b := []byte(`{"object":"list","data":[`)
	for i, n := range gen.names {
		if i > 0 {
			b = append(b, ',')
		}
		b = gen.appendModel(b, n)
	}
	b = append(b, "]}\n"...)
	_, _ = w.Write(b)
}

// model retrieves one route (GET /v1/models/{id}: openai-go's and
// anthropic-sdk-go's Models.Get), in the shape of the list's entries; an
// unknown route is a 404 in the client's format.
func (g *Gateway) model(w http.ResponseWriter, r *http.Request) {
	gen := g.modelsGen(w, r)
	if gen == nil {
		return
	}
	defer gen.release()
	d := modelsDoor(r)
	name := r.PathValue("id")
	if gen.routes[name] == nil && gen.implicit == nil {
		writeErr(w, d, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", param: "model",
			msg: "retryhost gateway: no route named " + strconv.Quote(name) + " (GET /v1/models lists them)"})
		return
	}
	var b []byte
	if _, ok := d.(messagesDoor); ok {
		b = appendAnthropicModel(b, name, gen.created)
	} else {
		b = gen.appendModel(b, name)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// modelsGen admits a request to the model endpoints: GET or HEAD, while a
// policy is loaded. It returns the generation with a reference held, or
// nil with the refusal written.
func (g *Gateway) modelsGen(w http.ResponseWriter, r *http.Request) *generation {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, modelsDoor(r), apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", code: "method_not_allowed",
			msg: "retryhost gateway: use GET"})
		return nil
	}
	gen := g.acquire()
	if gen == nil {
		writeErr(w, modelsDoor(r), errShutdown)
	}
	return gen
}

// appendModel appends route n as OpenAI's model object.
func (gen *generation) appendModel(b []byte, n string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, n)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, gen.created, 10)
	b = append(b, `,"owned_by":`...)
	rt := gen.routes[n]
	if rt == nil { // a name an implicit route serves
		rt = gen.implicit
	}
	b = appendJSONString(b, rt.ownedBy)
	return append(b, '}')
}
