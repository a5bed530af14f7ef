package tasks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Endpoint reads entities from an HTTP(S) endpoint, as Prometheus's
// http_sd does targets: a GET answered with JSON lines (one object a line,
// as FormatJSONL) or one JSON array (of such objects, or of ids as
// strings). It keeps the last list it read, and its ETag: a 304 answer to
// If-None-Match reuses that list without reading a body. When the
// endpoint fails (an error, a status other than 200 or 304, a body over
// MaxBytes, the Timeout, a redirect to another origin), the last good list
// is used if it is younger than MaxAge, and the failure is still returned
// (after the entities), saying which list was used.
//
// An Endpoint is used by pointer, and may be shared: its list is guarded.
type Endpoint struct {
	URL     string
	Headers map[string]string // sent with each request; Accept and If-None-Match are tickd's
	// Timeout bounds a request, its body read whole: a slow drip is cut
	// there. Defaults to a minute.
	Timeout time.Duration
	// MaxAge is how long the last good list stands in for an endpoint that
	// fails. Defaults to an hour.
	MaxAge time.Duration
	// MaxBytes bounds a body. Defaults to MaxEndpointBody.
	MaxBytes int64
	// MaxEntities bounds a list: the list is held in memory. Defaults to
	// MaxEndpointEntities.
	MaxEntities int
	Client      *http.Client // defaults to http.DefaultClient; redirects are followed within the URL's origin only
	Log         *slog.Logger

	mu     sync.Mutex
	list   []Entity  // the last good list; attribute maps shared, handed out cloned
	etag   string    // its ETag, if the endpoint gave one
	at     time.Time // when the endpoint last gave (200) or confirmed (304) it
	good   bool      // list was read at least once
	parsed int       // bodies read whole: a 304 does not add one
	now    func() time.Time
}

// The default bounds of an Endpoint's answer: its body, and the entities
// in it (the list is held in memory, about 100 bytes an entity, its
// attributes shared among the entities whose attributes are equal).
const (
	MaxEndpointBody     = 256 << 20
	MaxEndpointEntities = 2_000_000
)

// ErrSourceStale wraps the error of an Endpoint that failed: its entities
// came from the last good list (or, past MaxAge, none came).
var ErrSourceStale = errors.New("using the last good list")

// Each yields the endpoint's ids.
func (e *Endpoint) Each(ctx context.Context, fn func(string) error) error {
	return e.EachEntity(ctx, func(en Entity) error { return fn(en.ID) })
}

// EachEntity fetches the list (or has it confirmed) and yields it; when
// the fetch fails, it yields the last good list, younger than MaxAge, and
// returns the fetch's error, wrapping ErrSourceStale.
func (e *Endpoint) EachEntity(ctx context.Context, fn func(Entity) error) error {
	list, err := e.refresh(ctx)
	for _, en := range list {
		if cerr := ctx.Err(); cerr != nil {
			return context.Cause(ctx)
		}
		if ferr := fn(Entity{ID: en.ID, Attributes: maps.Clone(en.Attributes)}); ferr != nil {
			return ferr
		}
	}
	return err
}

// refresh is the list to yield, and the fetch's failure.
func (e *Endpoint) refresh(ctx context.Context) ([]Entity, error) {
	e.mu.Lock()
	etag := e.etag
	e.mu.Unlock()
	list, newTag, notModified, err := e.fetch(ctx, etag)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock()
	switch {
	case err == nil && notModified && e.good:
		e.at = now
		return e.list, nil
	case err == nil && !notModified:
		e.list, e.etag, e.at, e.good = list, newTag, now, true
		e.parsed++
		return e.list, nil
	case err == nil:
		err = errors.New("answered 304 Not Modified to a request that named no list")
	}
	if ctx.Err() != nil {
		return nil, err // shutdown, pause: not the endpoint's failure
	}
	switch age := now.Sub(e.at); {
	case !e.good:
		return nil, fmt.Errorf("%w: %w, and no list was read before it", ErrSourceStale, err)
	case age > e.maxAge():
		return nil, fmt.Errorf("%w: %w, and the last good list, of %s, is older than entities_max_age (%v): no entities", ErrSourceStale, err, e.at.UTC().Format(time.RFC3339), e.maxAge())
	default:
		return e.list, fmt.Errorf("%w: %w; using the list of %s", ErrSourceStale, err, e.at.UTC().Format(time.RFC3339))
	}
}

func (e *Endpoint) clock() time.Time {
	if e.now != nil {
		return e.now()
	}
	return time.Now()
}

func (e *Endpoint) maxAge() time.Duration {
	if e.MaxAge > 0 {
		return e.MaxAge
	}
	return time.Hour
}

// fetch GETs the list: a 304 to etag says the list stands (notModified).
func (e *Endpoint) fetch(ctx context.Context, etag string) (list []Entity, newTag string, notModified bool, err error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	shown := shownURL(e.URL)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("entities_url %s: no whole answer within entities_timeout (%v)", shown, timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL, nil)
	if err != nil {
		return nil, "", false, fmt.Errorf("entities_url %s: %w", shown, err)
	}
	for k, v := range e.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", "application/jsonl, application/json")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := e.client().Do(req)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil {
			return nil, "", false, cause
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message holds the whole URL
		}
		return nil, "", false, fmt.Errorf("entities_url %s: %w", shown, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, "", true, nil
	case http.StatusOK:
	default:
		return nil, "", false, fmt.Errorf("entities_url %s: %w %s", shown, ErrStatus, resp.Status)
	}
	list, err = e.read(ctx, resp.Body, e.maxBytes())
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, "", false, context.Cause(ctx) // it names the URL
	case err != nil:
		return nil, "", false, fmt.Errorf("entities_url %s: %w", shown, err)
	}
	return list, resp.Header.Get("ETag"), false, nil
}

func (e *Endpoint) maxBytes() int64 {
	if e.MaxBytes > 0 {
		return e.MaxBytes
	}
	return MaxEndpointBody
}

// client is e's client, following redirects within the URL's origin only:
// the headers (a token) never go to another host.
func (e *Endpoint) client() *http.Client {
	c := http.DefaultClient
	if e.Client != nil {
		c = e.Client
	}
	cc := *c
	origin, _ := url.Parse(e.URL)
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		switch {
		case origin == nil || req.URL.Scheme != origin.Scheme || req.URL.Host != origin.Host:
			return fmt.Errorf("%w: a redirect to another origin, %s, is not followed", ErrRedirect, shownURL(req.URL.String()))
		case len(via) >= 10:
			return fmt.Errorf("%w: more than 10 redirects", ErrRedirect)
		}
		return nil
	}
	return &cc
}

// ErrTooLarge is wrapped by the error of an Endpoint whose body is larger
// than its MaxBytes, or its list longer than its MaxEntities.
var ErrTooLarge = errors.New("answer too large")

// read reads a body whole, as JSON lines or one JSON array: an entity it
// cannot use is skipped and reported with its line (or item) number; a
// body over max, or an array that is not JSON, fails the whole read.
func (e *Endpoint) read(ctx context.Context, body io.Reader, max int64) ([]Entity, error) {
	lr := &capReader{r: body, n: max, max: max}
	br := bufio.NewReaderSize(lr, 64*1024)
	first, err := firstByte(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, lr.explain(err)
	}
	in := interner{}
	var list []Entity
	maxN := e.MaxEntities
	if maxN <= 0 {
		maxN = MaxEndpointEntities
	}
	add := func(en Entity) error {
		if len(list) == maxN {
			return fmt.Errorf("%w: more than %d entities", ErrTooLarge, maxN)
		}
		en.Attributes = in.intern(en.Attributes)
		list = append(list, en)
		return nil
	}
	if first == '[' {
		err = jsonArray(ctx, br, shownURL(e.URL), e.Log, add)
	} else {
		err = entityLines(ctx, newLineReader(br, shownURL(e.URL), FormatJSONL, e.Log), FormatJSONL, add)
	}
	if err != nil {
		return nil, lr.explain(err)
	}
	return slices.Clip(list), nil
}

// firstByte peeks at the first byte that is not white space.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		if !strings.ContainsRune(" \t\r\n", rune(b)) {
			return b, br.UnreadByte()
		}
	}
}

// jsonArray reads one JSON array of entities: objects as FormatJSONL's
// lines, or ids as strings.
func jsonArray(ctx context.Context, r io.Reader, name string, log *slog.Logger, fn func(Entity) error) error {
	d := json.NewDecoder(r)
	if _, err := d.Token(); err != nil { // [
		return err
	}
	skipped := &lineReader{name: name, log: log}
	for item := 1; d.More(); item++ {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return fmt.Errorf("item %d: %w", item, err)
		}
		en, bad := arrayItem(raw)
		if bad != nil {
			skipped.skip(item, bad)
			continue
		}
		if err := fn(en); err != nil {
			return err
		}
	}
	if _, err := d.Token(); err != nil { // ]
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value in the body")
	}
	skipped.done()
	return nil
}

// arrayItem is one item of a JSON array of entities.
func arrayItem(raw json.RawMessage) (Entity, error) {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return Entity{ID: id}, CheckID(id)
	}
	return ParseEntityLine(string(raw))
}

// capReader reads at most n bytes of r, then fails with ErrTooLarge.
type capReader struct {
	r      io.Reader
	n, max int64
	over   bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		// One byte more says whether the body ended right at the cap.
		var one [1]byte
		if k, _ := c.r.Read(one[:]); k > 0 {
			c.over = true
			return 0, ErrTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	return k, err
}

// explain is err, or, when the body went over the cap, ErrTooLarge (a JSON
// error there is only the cut's).
func (c *capReader) explain(err error) error {
	if c.over {
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, c.max)
	}
	return err
}

// interner shares one map among the entities whose attributes are equal:
// a list of a million entities in 400 zones holds 400 maps.
type interner map[string]Attributes

func (in interner) intern(a Attributes) Attributes {
	if a == nil {
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(a)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(a[k])
		b.WriteByte(0)
	}
	key := b.String()
	if shared, ok := in[key]; ok {
		return shared
	}
	in[key] = a
	return a
}
