package main

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func check(ops []Op) bool {
	return porcupine.CheckOperations(model, operations(ops, math.MaxInt64))
}

func ok(client int, op string, value string, call, ret int64, out string) Op {
	return Op{Client: client, Key: "k", Op: op, Value: value, Call: call, Ret: ret, Outcome: "ok", Out: out}
}

func TestAReadAfterAnAcknowledgedWriteMustSeeIt(t *testing.T) {
	good := []Op{
		ok(0, "set", "a", 0, 10, "STORED"),
		ok(0, "set", "b", 20, 30, "STORED"),
		ok(1, "get", "", 25, 28, "hit:a"), // concurrent with set b: either is fine
		ok(1, "get", "", 40, 50, "hit:b"),
	}
	if !check(good) {
		t.Fatal("a linearizable history was refused")
	}
	stale := append(good[:3:3], ok(1, "get", "", 40, 50, "hit:a"))
	if check(stale) {
		t.Fatal("a stale read passed")
	}
	ce := shortest("k", stale, 0)
	if ce == nil || ce.Culprit.Ret != 50 || ce.PrefixOps != 4 {
		t.Fatalf("counterexample %+v", ce)
	}
}

func TestAnIncrCountsOnce(t *testing.T) {
	h := []Op{
		ok(0, "set", "10", 0, 10, "STORED"),
		{Client: 1, Key: "k", Op: "incr", Call: 20, Ret: 30, Outcome: "unknown"},
		ok(2, "incr", "", 40, 50, "12"),
	}
	if !check(h) {
		t.Fatal("an unknown incr that took effect was refused")
	}
	h[2].Out = "11"
	if !check(h) {
		t.Fatal("an unknown incr that did not take effect was refused")
	}
	h[2].Out = "13"
	if check(h) {
		t.Fatal("an incr counted twice passed")
	}
}

func TestCasAppliesOnlyOverTheValueItSaw(t *testing.T) {
	h := []Op{
		ok(0, "set", "a", 0, 10, "STORED"),
		ok(1, "set", "b", 20, 30, "STORED"),
		{Client: 2, Key: "k", Op: "cas", Value: "c", Expect: "a", Call: 40, Ret: 50, Outcome: "ok", Out: "STORED"},
	}
	if check(h) {
		t.Fatal("a cas over an overwritten value passed")
	}
	h[2].Out = "EXISTS"
	if !check(h) {
		t.Fatal("a refused cas was refused")
	}
}

func TestAFailedOpHasNoEffectAndAnAcknowledgedDeleteSticks(t *testing.T) {
	h := []Op{
		ok(0, "set", "a", 0, 10, "STORED"),
		{Client: 1, Key: "k", Op: "set", Value: "b", Call: 20, Ret: 30, Outcome: "fail"},
		ok(0, "delete", "", 40, 50, "DELETED"),
		ok(1, "get", "", 60, 70, "miss"),
	}
	if !check(h) {
		t.Fatal("refused")
	}
	h[3].Out = "hit:a"
	if check(h) {
		t.Fatal("a value read back after its acknowledged delete passed")
	}
}
