package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

type mode int

const (
	plainMode mode = iota
	clusterMode
	sentinelMode
)

// topologyWait bounds how long a topology takes to form (a cluster's
// nodes to agree, sentinels to find each other and the replica).
const topologyWait = 30 * time.Second

// Cluster is a Redis Cluster of three masters without replicas, each
// serving a third of the hash slots.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a three-master cluster for t (CLUSTER ADDSLOTSRANGE
// and CLUSTER MEET, as redis-cli --cluster create does) and stops it at
// t's cleanup. It skips t as [Start] does.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := binary(t)
	c := &Cluster{}
	for range 3 {
		c.Nodes = append(c.Nodes, startServer(t, &Server{t: t, bin: bin, dir: t.TempDir(), mode: clusterMode}))
	}
	const slots = 16384
	for i, n := range c.Nodes {
		lo, hi := i*slots/len(c.Nodes), (i+1)*slots/len(c.Nodes)-1
		if err := okReply(n.Query("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))); err != nil {
			t.Fatalf("redistest: cluster: ADDSLOTSRANGE on %s: %v", n.Addr(), err)
		}
	}
	for _, n := range c.Nodes[1:] {
		if err := okReply(c.Nodes[0].Query("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port))); err != nil {
			t.Fatalf("redistest: cluster: MEET %s: %v", n.Addr(), err)
		}
	}
	waitFor(t, "the cluster's nodes to agree (cluster_state:ok, 3 known nodes)", func() bool {
		for _, n := range c.Nodes {
			r, err := n.Query("CLUSTER", "INFO")
			if err != nil || len(r) != 1 || !strings.Contains(r[0], "cluster_state:ok") || !strings.Contains(r[0], "cluster_known_nodes:3") {
				return false
			}
		}
		return true
	})
	return c
}

// Addrs are the nodes' host:port.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// URL is the cluster's redis+cluster:// URL: the first node, the others
// as addr parameters.
func (c *Cluster) URL() string {
	q := url.Values{}
	for _, a := range c.Addrs()[1:] {
		q.Add("addr", a)
	}
	return "redis+cluster://" + c.Nodes[0].Addr() + "?" + q.Encode()
}

// Sentinel is a primary, its replica and three sentinels watching the
// primary as MasterName with a quorum of two; a primary that stops
// answering for half a second is failed over.
type Sentinel struct {
	MasterName string
	Primary    *Server
	Replica    *Server
	Sentinels  []*Server
}

// StartSentinel starts a Sentinel topology for t and stops it at t's
// cleanup. It returns once the replica is in sync and every sentinel
// knows the replica and the two other sentinels, so that a failover can
// start at once. It skips t as [Start] does.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := binary(t)
	s := &Sentinel{MasterName: "retryhost"}
	s.Primary = startServer(t, &Server{t: t, bin: bin, dir: t.TempDir()})
	s.Replica = startServer(t, &Server{t: t, bin: bin, dir: t.TempDir(),
		args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.port)}})
	waitFor(t, "the replica to sync", func() bool {
		r, err := s.Replica.Query("INFO", "replication")
		return err == nil && len(r) == 1 && strings.Contains(r[0], "master_link_status:up")
	})
	for range 3 {
		s.Sentinels = append(s.Sentinels, startServer(t, &Server{t: t, bin: bin, dir: t.TempDir(), mode: sentinelMode, conf: []string{
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", s.MasterName, s.Primary.port),
			"sentinel down-after-milliseconds " + s.MasterName + " 500",
			"sentinel failover-timeout " + s.MasterName + " 5000",
			"sentinel parallel-syncs " + s.MasterName + " 1",
		}}))
	}
	waitFor(t, "the sentinels to find the replica and each other", func() bool {
		for _, sn := range s.Sentinels {
			reps, err1 := sn.Query("SENTINEL", "REPLICAS", s.MasterName)
			sens, err2 := sn.Query("SENTINEL", "SENTINELS", s.MasterName)
			if err1 != nil || err2 != nil || countField(reps, "name") != 1 || countField(sens, "name") != 2 {
				return false
			}
		}
		return true
	})
	return s
}

// countField counts the occurrences of name among a flattened reply's
// field names (even positions of a map-like array).
func countField(r []string, name string) int {
	n := 0
	for i := 0; i+1 < len(r); i += 2 {
		if r[i] == name {
			n++
		}
	}
	return n
}

// URL is the topology's redis+sentinel:// URL: the first sentinel, the
// others as addr parameters, the master's name, database 0.
func (s *Sentinel) URL() string {
	q := url.Values{"master_name": {s.MasterName}}
	for _, sn := range s.Sentinels[1:] {
		q.Add("addr", sn.Addr())
	}
	return "redis+sentinel://" + s.Sentinels[0].Addr() + "/0?" + q.Encode()
}

// PrimaryAddr is the primary's host:port as the first sentinel that
// answers sees it.
func (s *Sentinel) PrimaryAddr() (string, error) {
	var err error
	for _, sn := range s.Sentinels {
		var r []string
		if r, err = sn.Query("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName); err == nil {
			if len(r) != 2 {
				return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %q", r)
			}
			return net.JoinHostPort(r[0], r[1]), nil
		}
	}
	return "", err
}

// WaitPromoted waits until every sentinel names the replica as the
// primary (after the primary was killed) and the replica says it is one.
func (s *Sentinel) WaitPromoted(t testing.TB) {
	t.Helper()
	waitFor(t, "the sentinels to promote the replica", func() bool {
		for _, sn := range s.Sentinels {
			r, err := sn.Query("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
			if err != nil || len(r) != 2 || r[1] != strconv.Itoa(s.Replica.port) {
				return false
			}
		}
		r, err := s.Replica.Query("ROLE")
		return err == nil && len(r) > 0 && r[0] == "master"
	})
}

func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(topologyWait)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: waited %v for %s", topologyWait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func okReply(r []string, err error) error {
	if err != nil {
		return err
	}
	if len(r) != 1 || r[0] != "OK" {
		return fmt.Errorf("reply %q", r)
	}
	return nil
}

// Query sends one command and returns its whole reply flattened: a simple
// or bulk string or an integer as one element, an array's elements (and
// its nested arrays') in order, a nil as "". An error reply is an error.
func (s *Server) Query(args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	var out []string
	return out, readReply(bufio.NewReader(c), &out)
}

func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
	case '-':
		return errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		for range max(n, 0) {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}
