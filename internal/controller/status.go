package controller

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"imagecache.io/imagecache/api/v1alpha1"
	"imagecache.io/imagecache/internal/files"
)

func client404(err error) bool { return apierrors.IsNotFound(err) }

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// withOlderThanMinimum adds to a set's message that its upstream copy is still older than the minimum
// modification time: it is served, but it is not what the resource asks for.
func withOlderThanMinimum(msg, source, field string) string {
	note := fmt.Sprintf("the copy at %s is still older than %s", source, field)
	if msg == "" {
		return note
	}
	return msg + "; " + note
}

// setConditions writes Ready and Degraded from the problems found.
func setConditions(conds *[]metav1.Condition, generation int64, ready bool, readyReason, readyMsg string, problems []string) {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionReady, Status: status, Reason: readyReason,
		Message: readyMsg, ObservedGeneration: generation})
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AllFetched",
		Message: "every entry was fetched or confirmed at the last check", ObservedGeneration: generation}
	if len(problems) > 0 {
		degraded.Status, degraded.Reason = metav1.ConditionTrue, "FetchProblems"
		degraded.Message = joinMax(problems, 5)
	}
	meta.SetStatusCondition(conds, degraded)
}

func joinMax(msgs []string, n int) string {
	out := ""
	for i, m := range msgs {
		if i == n {
			return out + fmt.Sprintf("; and %d more", len(msgs)-n)
		}
		if i > 0 {
			out += "; "
		}
		out += m
	}
	return out
}

// fileSetState maps a served set's state to the resource vocabulary.
func fileSetState(s files.State) string {
	switch s {
	case files.Ready:
		return v1alpha1.StateCached
	case files.Stale:
		return v1alpha1.StateStale
	case files.Pending:
		return v1alpha1.StateFetching
	}
	return v1alpha1.StateFailed
}

func timePtr(t metav1.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
