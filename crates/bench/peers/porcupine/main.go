// Checks a history of memcached operations for linearizability with porcupine.
//
// Reads a history (JSON, the format of `load::history`) from the file named by the first
// argument, or standard input, checks every key's operations against a model of one memcached
// item (get, set, cas, incr, delete), and prints one JSON object: the verdict, each key's, and
// for an illegal key the first operation no linearization explains with the operations around it.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one operation of the history, as the load driver wrote it.
type Op struct {
	Client int    `json:"client"`
	Key    string `json:"key"`
	Op     string `json:"op"`
	// The value a set writes or a cas writes.
	Value string `json:"value,omitempty"`
	// The value a cas expects (the one its gets saw with the token).
	Expect string `json:"expect,omitempty"`
	// Nanoseconds since the history began.
	Call int64 `json:"call"`
	Ret  int64 `json:"ret"`
	// ok (Out is the reply), fail (no effect: dropped), unknown (it may have taken effect).
	Outcome string `json:"outcome"`
	Out     string `json:"out,omitempty"`
}

type history struct {
	Ops []Op `json:"ops"`
}

// item is the model's state: one memcached item, present or not.
type item struct {
	present bool
	value   string
}

const unknown = "?"

func step(s interface{}, in interface{}, out interface{}) (bool, interface{}) {
	st := s.(item)
	op := in.(Op)
	o := out.(string)
	switch op.Op {
	case "get":
		if o == unknown {
			return true, st
		}
		if o == "miss" {
			return !st.present, st
		}
		v, hit := strings.CutPrefix(o, "hit:")
		return hit && st.present && st.value == v, st
	case "set":
		return o == unknown || o == "STORED", item{true, op.Value}
	case "cas":
		matches := st.present && st.value == op.Expect
		switch o {
		case unknown:
			if matches {
				return true, item{true, op.Value}
			}
			return true, st
		case "STORED":
			return matches, item{true, op.Value}
		case "EXISTS":
			return st.present && !matches, st
		case "NOT_FOUND":
			return !st.present, st
		}
		return false, st
	case "incr":
		n, err := strconv.ParseUint(st.value, 10, 64)
		numeric := st.present && err == nil
		next := item{true, strconv.FormatUint(n+1, 10)}
		switch o {
		case unknown:
			if numeric {
				return true, next
			}
			return true, st
		case "NOT_FOUND":
			return !st.present, st
		}
		return numeric && o == next.value, next
	case "delete":
		switch o {
		case unknown:
			return true, item{}
		case "DELETED":
			return st.present, item{}
		case "NOT_FOUND":
			return !st.present, st
		}
		return false, st
	}
	return false, st
}

func describe(in interface{}, out interface{}) string {
	op := in.(Op)
	switch op.Op {
	case "set":
		return fmt.Sprintf("set(%s) -> %v", op.Value, out)
	case "cas":
		return fmt.Sprintf("cas(%s if %s) -> %v", op.Value, op.Expect, out)
	}
	return fmt.Sprintf("%s -> %v", op.Op, out)
}

var model = porcupine.Model{
	Init:              func() interface{} { return item{} },
	Step:              step,
	DescribeOperation: describe,
}

// operations turns a key's ops into porcupine's, up to time `until` (math.MaxInt64: all): an
// op invoked by then but not answered by then (or never: unknown) is pending, its output
// unknown and its return at the end of time; a failed op had no effect and is left out.
func operations(ops []Op, until int64) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Outcome == "fail" || op.Call > until {
			continue
		}
		o := porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Output: op.Out, Return: op.Ret}
		if op.Outcome == "unknown" || op.Ret > until {
			o.Output = unknown
			o.Return = math.MaxInt64
		}
		out = append(out, o)
	}
	return out
}

type keyResult struct {
	Key    string `json:"key"`
	Ops    int    `json:"ops"`
	Result string `json:"result"`
}

type counterexample struct {
	Key string `json:"key"`
	// The op whose reply first makes the history (cut at its return) not linearizable.
	Culprit Op `json:"culprit"`
	// The ops of that key concurrent with it, and the last ones answered before it began.
	Context []Op `json:"context"`
	// How many ops of the key the shortest illegal prefix holds.
	PrefixOps int `json:"prefix_ops"`
}

type verdict struct {
	Result         string          `json:"result"`
	Keys           []keyResult     `json:"keys"`
	Counterexample *counterexample `json:"counterexample,omitempty"`
}

// shortest finds the earliest return time t such that the history cut at t is illegal (cuts
// are monotone: a linearizable history has linearizable cuts), and the ops around it.
func shortest(key string, ops []Op, timeout time.Duration) *counterexample {
	var rets []int64
	for _, op := range ops {
		if op.Outcome == "ok" {
			rets = append(rets, op.Ret)
		}
	}
	sort.Slice(rets, func(i, j int) bool { return rets[i] < rets[j] })
	illegal := func(t int64) bool {
		return porcupine.CheckOperationsTimeout(model, operations(ops, t), timeout) == porcupine.Illegal
	}
	lo, hi := 0, len(rets)-1
	if hi < 0 || !illegal(rets[hi]) {
		return nil
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(rets[mid]) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	t := rets[lo]
	ce := &counterexample{Key: key, PrefixOps: len(operations(ops, t))}
	var before []Op
	for _, op := range ops {
		if op.Outcome == "ok" && op.Ret == t && ce.Culprit.Op == "" {
			ce.Culprit = op
		}
	}
	for _, op := range ops {
		if op.Outcome == "fail" || op == ce.Culprit || op.Call > t {
			continue
		}
		if op.Outcome == "ok" && op.Ret < ce.Culprit.Call {
			before = append(before, op)
		} else {
			ce.Context = append(ce.Context, op)
		}
	}
	sort.Slice(before, func(i, j int) bool { return before[i].Ret < before[j].Ret })
	if len(before) > 6 {
		before = before[len(before)-6:]
	}
	ce.Context = append(before, ce.Context...)
	return ce
}

func main() {
	timeout := 120 * time.Second
	var r io.Reader = os.Stdin
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		r = f
	}
	var h history
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		fmt.Fprintln(os.Stderr, "reading the history:", err)
		os.Exit(2)
	}
	byKey := map[string][]Op{}
	var keys []string
	for _, op := range h.Ops {
		if _, seen := byKey[op.Key]; !seen {
			keys = append(keys, op.Key)
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	sort.Strings(keys)
	v := verdict{Result: "ok"}
	for _, k := range keys {
		ops := byKey[k]
		res := porcupine.CheckOperationsTimeout(model, operations(ops, math.MaxInt64), timeout)
		kr := keyResult{Key: k, Ops: len(ops), Result: "ok"}
		switch res {
		case porcupine.Illegal:
			kr.Result = "illegal"
			v.Result = "illegal"
			if v.Counterexample == nil {
				v.Counterexample = shortest(k, ops, timeout)
			}
		case porcupine.Unknown:
			kr.Result = "unknown"
			if v.Result == "ok" {
				v.Result = "unknown"
			}
		}
		v.Keys = append(v.Keys, kr)
	}
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
}
